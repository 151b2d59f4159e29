
# 537_quota_gaps.pl - the gaps a hostile review found in the quotas and
# bounds of issue 35, each checked against what ZooKeeper really holds.
#
# A small cluster (max_connections 6, few worker processes), so that the
# table of write rates (one slot per backend slot) is small.
#
#   A. Slots that owe are never reused (item 3): 40 roles write one 8 kB
#      item each at zklock.max_write_rate 1 kB/s; once every slot holds a
#      role that still owes, the next role is refused (53400, hint), and
#      nothing of its write reaches ZooKeeper; the first role's backlog is
#      still in zk_quotas (its debt was not forgotten to make room).
#   B. Count before listing (item 4), zklock.max_children = 20: another
#      client puts 25 children under a barrier a member has entered, and
#      under a queue's node: zk_barrier_leave and zk_queue_drop fail at once
#      with 54000 (hint names the setting) instead of listing them; the
#      member's node is gone, the queue's nodes are all there.
#   C. Semaphore pools go with their last lease, and are charged (item 1):
#      a role takes and releases 30 distinct semaphores: ZooKeeper keeps no
#      node of them, and zk_quotas shows the creates charged; two sessions
#      in one pool: the first release leaves the pool (the other's lease is
#      in it), the second deletes it; taken again, it is created again.
#   D. Lock churn is charged (item 2): at 16 kB/s (burst 64 kB) 400 lock
#      cycles of new names are paced by the rate (256 bytes each: 256 at
#      once, the rest at 64 a second), and charged in zk_quotas; at the
#      default rate 400 cycles do not wait at all.
#   E. Kept items in flight (item 5): zklock.max_kept_items = 3, four
#      sessions each enqueue 2 items and COMMIT at the same instant: one
#      transaction goes, the others fail with 53400, and ZooKeeper holds 2
#      items (the worker counts the publications it has let through but
#      not yet applied).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('qgaps', $zk,
	connect_timeout => '5s',
	conf => "max_connections = 6\nautovacuum_max_workers = 1\n"
	  . "max_worker_processes = 3\nmax_wal_senders = 0\n"
	  . "max_prepared_transactions = 0\n");

sub q1 { return out_or_error($node, $_[0]); }

sub qpath { return q1("SELECT zk_path('queue', '$_[0]')"); }

# Another client (kazoo) creates children $prefix1..$prefix$n under $path
sub foreign_children
{
	my ($path, $prefix, $n) = @_;
	my $py = 'import sys, logging; logging.basicConfig(level=logging.CRITICAL)
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1]); zk.start(timeout=10)
for i in range(1, int(sys.argv[4]) + 1):
    zk.create("%s/%s%d" % (sys.argv[2], sys.argv[3], i), b"x", makepath=True)
zk.stop()';
	system($ZkLockTest::PYTHON, '-c', $py, $zk->{hosts}, $path, $prefix, $n) == 0
	  or die "kazoo could not create the children of $path";
}
sub items { return zk_count($zk, qpath($_[0]) . '/entries'); }

#
# B. count before listing
#
$node->safe_psql('postgres',
	"ALTER SYSTEM SET zklock.max_children = 20; SELECT pg_reload_conf()");
sleep 0.5;
my $b = new_session($node, name => 'barrier');
is($b->query_safe("SELECT zk_barrier_enter('lb', 1, '10 s')"), 't', 'B: a member enters barrier lb');
my $bpath = q1("SELECT zk_path('barrier', 'lb')");
foreign_children($bpath, 'f', 25);
my $t0 = time;
my $r = $b->query("SELECT zk_barrier_leave('lb', '4 s')");
my $took = time - $t0;
is($r->{sqlstate}, '54000', 'B: zk_barrier_leave past zklock.max_children: 54000') or diag $r->{err};
like($r->{err}, qr/HINT:.*zklock\.max_children/, 'B: hint names zklock.max_children') or diag $r->{err};
ok($took < 3, sprintf('B: at once (%.2f s), not after the timeout', $took));
ok(wait_until(sub { (grep { !/^(f\d+|ready)$/ } zk_children($zk, $bpath)) == 0 }, 10, 0.2),
	'B: the member\'s node is gone from ZooKeeper')
  or diag join(' ', zk_children($zk, $bpath));
$b->quit;

my $dq = qpath('dq');
foreign_children($dq, 'f', 25);
$r = one_shot($node, "SELECT zk_queue_drop('dq')");
is($r->{sqlstate}, '54000', 'B: zk_queue_drop past zklock.max_children: 54000') or diag $r->{err};
like($r->{err}, qr/HINT:.*zklock\.max_children/, 'B: hint names zklock.max_children') or diag $r->{err};
is(zk_count($zk, $dq), 25, 'B: nothing was deleted');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET zklock.max_children; SELECT pg_reload_conf()");

#
# C. semaphore pools go with their last lease, and are charged
#
$node->safe_psql('postgres', q{
CREATE ROLE sem537 LOGIN; SELECT zk_grant('semaphore', 'sem537');
CREATE ROLE lk537 LOGIN; SELECT zk_grant('lock', 'lk537');
CREATE ROLE lkd537 LOGIN; SELECT zk_grant('lock', 'lkd537');
ALTER ROLE lk537 SET zklock.max_write_rate = '16kB';
ALTER ROLE lk537 SET zklock.max_write_burst = '64kB';
});
my $sem = new_session($node, name => 'sem', user => 'sem537');
$r = $sem->query(q{DO $$ BEGIN FOR i IN 1..30 LOOP
  PERFORM zk_try_session_semaphore('s' || i, 2); PERFORM zk_semaphore_release('s' || i);
END LOOP; END $$});
is($r->{sqlstate}, '00000', 'C: a role takes and releases 30 semaphores') or diag $r->{err};
ok(wait_until(sub { zk_count($zk, '/zklock/semaphores') == 0 }, 10, 0.2),
	'C: ZooKeeper keeps no node of them (pools and leases gone)')
  or diag join(' ', zk_children($zk, '/zklock/semaphores'));
my $w = q1("SELECT bytes_written FROM zk_quotas WHERE role = 'sem537'");
ok($w =~ /^\d+$/ && $w >= 30 * 3 * 256, "C: the creates are charged to the role's write rate ($w bytes)");

my $sem2 = new_session($node, name => 'sem2', user => 'sem537');
is($sem->query_safe("SELECT zk_try_session_semaphore('two', 2)"), 't', 'C: one session takes a lease of two');
is($sem2->query_safe("SELECT zk_try_session_semaphore('two', 2)"), 't', 'C: another takes the other');
my $pool = q1("SELECT zk_path('semaphore', 'two')");
is(zk_count($zk, $pool), 2, 'C: ZooKeeper holds both leases');
$sem->query_safe("SELECT zk_semaphore_release('two')");
ok(wait_until(sub { zk_count($zk, $pool) == 1 }, 10, 0.2), 'C: the first release deletes its lease');
sleep 0.5;
ok(zk_exists($zk, $pool), 'C: the pool stays while the other lease is in it');
is($sem->query_safe("SELECT zk_try_session_semaphore('two', 2)"), 't', 'C: taken again');
$sem->query_safe("SELECT zk_semaphore_release('two')");
$sem2->query_safe("SELECT zk_semaphore_release('two')");
ok(wait_until(sub { !zk_exists($zk, $pool) }, 10, 0.2), 'C: the last release deletes the pool');
is($sem2->query_safe("SELECT zk_try_session_semaphore('two', 2)"), 't', 'C: a new take creates it again');
is(zk_count($zk, $pool), 1, 'C: with its lease');
$sem2->query_safe("SELECT zk_semaphore_release('two')");
$sem->quit;
$sem2->quit;

#
# D. lock churn is charged
#
my $churn = q{DO $$ BEGIN FOR i IN 1..400 LOOP
  PERFORM zk_try_session_lock('c' || i); PERFORM zk_unlock('c' || i);
END LOOP; END $$};
my $ld = new_session($node, name => 'lkd', user => 'lkd537');
$t0 = time;
$r = $ld->query($churn, 60);
my $fast = time - $t0;
is($r->{sqlstate}, '00000', 'D: at the default rate, 400 lock cycles') or diag $r->{err};
is(q1("SELECT writes_refused || '|' || (bytes_written >= 400 * 256) FROM zk_quotas WHERE role = 'lkd537'"),
	'0|true', 'D: charged, none refused');
$ld->quit;
my $lk = new_session($node, name => 'lk', user => 'lk537');
$t0 = time;
$r = $lk->query($churn, 60);
$took = time - $t0;
is($r->{sqlstate}, '00000', 'D: at 16 kB/s, 400 lock cycles go through') or diag $r->{err};
ok($took >= 2.0,
	sprintf('D: paced by the rate: %.2f s, at least the 2.25 s that 144 cycles take at 64 a second (%.2f s at the default rate)', $took, $fast));
$w = q1("SELECT bytes_written FROM zk_quotas WHERE role = 'lk537'");
ok($w =~ /^\d+$/ && $w >= 400 * 256, "D: charged to the role ($w bytes)");
$lk->quit;

#
# E. kept items in flight
#
my @kp = map { new_session($node, name => "kept$_") } 1 .. 4;
for my $k (0 .. $#kp)
{
	$kp[$k]->query_safe("SET zklock.max_kept_items = 3; BEGIN; "
		  . "SELECT zk_enqueue('race', 'r$k-' || i) FROM generate_series(1, 2) i");
}
$_->send('COMMIT') for @kp;
my @st = map { $_->wait(60)->{sqlstate} } @kp;
my $went = grep { $_ eq '00000' } @st;
my $refused53400 = grep { $_ eq '53400' } @st;
note "E: COMMITs: @st";
is(items('race'), 2, 'E: ZooKeeper holds the 2 items of one transaction (max_kept_items 3)');
is($went, 1, 'E: one COMMIT went');
is($refused53400, 3, 'E: the three others failed with 53400');
$_->quit for @kp;

#
# A. slots that owe are never reused
#
my $nroles = 40;
$node->safe_psql('postgres', join("\n",
	map { "CREATE ROLE q$_; SELECT zk_grant('produce', 'q$_');" } 1 .. $nroles));
$node->safe_psql('postgres',
	"ALTER SYSTEM SET zklock.max_write_rate = '1kB'; SELECT pg_reload_conf()");
sleep 0.5;
my $s = new_session($node, name => 'slots');
is($s->query_safe('SHOW zklock.max_write_rate'), '1kB', 'A: every role writes at 1 kB/s');
my ($ok, $refused) = (0, undef);
for my $i (1 .. $nroles)
{
	# the session user is what is charged: SET SESSION AUTHORIZATION
	my $r = $s->query("SET SESSION AUTHORIZATION q$i; "
		  . "SELECT zk_enqueue('slots', repeat('x', 8000)); RESET SESSION AUTHORIZATION");
	if ($r->{err} =~ /ERROR:\s+([0-9A-Z]{5}):/)
	{
		$refused = { %$r, sqlstate => $1 };
		note "A: role q$i refused after $ok roles wrote";
		last;
	}
	$ok++;
}
ok(defined $refused, "A: once every slot owes, another role is refused (after $ok roles)");
ok($ok >= 5 && $ok < $nroles, "A: each of the first roles got a slot ($ok)");
is($refused && $refused->{sqlstate}, '53400', 'A: 53400');
like($refused && $refused->{err}, qr/too many roles write into zookeeper at once/, 'A: message says why')
  or diag $refused && $refused->{err};
like($refused && $refused->{err}, qr/HINT:.*Retry.*zklock\.max_write_rate/s, 'A: hint says what to do');
is(items('slots'), $ok, "A: ZooKeeper holds the $ok items of the roles with a slot, nothing of the refused one");
my $backlog = q1("SELECT write_backlog FROM zk_quotas WHERE role = 'q1'");
ok($backlog =~ /^\d+$/ && $backlog > 0,
	"A: the first role still owes in zk_quotas ($backlog bytes): its slot was not given away");
$s->quit;
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET zklock.max_write_rate; SELECT pg_reload_conf()");

$node->stop;
zk_stop($zk);
done_testing();
