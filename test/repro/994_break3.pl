
# 994_break3.pl - hostile review of what landed for issue 35 (breaker,
# third round): the root's kept totals (src/core/kept.c) when another client
# changes ZooKeeper's quota nodes.  A cluster with credentials, a kazoo
# client with the same credentials (trusted like a cluster, doc/security.md)
# or, without zklock.auth_file, any client:
#
#   A. rewrites the stats node with values ZooKeeper accepts but zklock's
#      parser refuses (negative counts): zklock should warn or stop calling
#      the bound enforced; it keeps 'enforced', no WARNING, and every
#      COMMIT passes the bound.
#   B. deletes only zookeeper_limits: ZooKeeper stops counting (the stats
#      freeze); zklock keeps reading the frozen stats as 'enforced' and lets
#      the producer pass max_kept_bytes, silently.
#   C. writes garbage into the stats node: the next write under the root
#      makes ZooKeeper (3.8.0 and 3.9.6) exit, and it cannot start again
#      (the write is replayed from its log); doc/limits.md does not say so.
#   D. a full root: another tenant's consume and an admin's zk_queue_drop
#      still work (they must never be refused).
#   E. a namespace a superuser configured (ALTER DATABASE bobdb SET
#      zklock.namespace = 'etl') is not claimed: a new database named etl
#      (its owner has only CREATEDB) records 'etl' and reads bob's items.
#   F. 16 concurrent COMMITs of 150 kB near the bound: the overshoot.
#   G. max_kept_items under 16 concurrent COMMITs into one queue (held).
#   H. 50 semaphores taken and released leave no pool (held).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $Q = '/zookeeper/quota/zklock';
my $STATS = "$Q/zookeeper_stats";
my $LIMITS = "$Q/zookeeper_limits";
my $MAX = 1024 * 1024;

$ENV{ZKLOCK_ZK_AUTH} = 'zkl:secret';
my $kz = auth_kazoo($zk, 'zkl:secret');
my $auth = write_mode_file("$tmp/zk.auth", "zkl:secret\n", 0600);
my $node = zk_node('brk3', $zk,
	namespace => undef,
	connect_timeout => '5s',
	conf => "zklock.auth_file = '$auth'\nzklock.max_kept_bytes = '1MB'\nzklock.max_write_rate = 0\n");

sub q1 { return out_or_error($node, $_[0]); }

sub totals
{
	return q1("SELECT concat_ws('|', state, coalesce(kept_nodes::text, ''), coalesce(kept_bytes::text, ''), writes_refused, coalesce(detail, '')) FROM zk_kept_totals()");
}

sub real_bytes
{
	my $out = zkq($zk, 'sizes', '/zklock') // '';
	return $out =~ /^(\d+) (\d+)$/ ? $2 + 0 : -1;
}

$node->safe_psql('postgres', q{
CREATE ROLE prod994 LOGIN; CREATE ROLE cons994 LOGIN;
SELECT zk_grant('produce', 'prod994'); SELECT zk_grant('consume', 'cons994');
CREATE ROLE bob LOGIN CREATEDB; CREATE ROLE carol LOGIN CREATEDB;
});
my $su = $node->safe_psql('postgres', 'SELECT current_user');

sub run
{
	my ($db, $sql, $user) = @_;
	return sqlstate_psql($node, $db, $sql, $user // $su, timeout => 60);
}

sub install
{
	my ($db, $user) = @_;
	return run($db, qq{
		CREATE SCHEMA zk;
		CREATE EXTENSION zklock SCHEMA zk;
		GRANT USAGE ON SCHEMA zk TO $user;
		SELECT zk.zk_grant('consume', '$user');
		SELECT zk.zk_grant('produce', '$user');
		ALTER DATABASE $db SET search_path = "\$user", public, zk;
	});
}
my $p = new_session($node, name => 'prod', user => 'prod994');
my $fill = "BEGIN; SELECT count(zk_enqueue('%s', repeat('x', 15000))) FROM generate_series(1, 10); COMMIT";
my $qn = 0;

# commit 150 kB transactions until refused or $n of them passed
sub fill
{
	my ($n) = @_;
	my ($ok, $r) = (0, undef);
	for (1 .. $n)
	{
		$r = $p->query(sprintf($fill, 'q' . $qn++));
		last if $r->{sqlstate} ne '00000';
		$ok++;
	}
	return ($ok, $r);
}

ok(wait_until(sub { totals() =~ /^enforced\|/ }, 20), 'enforced at start') or diag totals();

#
# A. stats ZooKeeper accepts, zklock cannot read
#
is($kz->cmd("set $STATS count=-1000000,bytes=-1000000000"), 'ok',
	'A: a client with the credentials writes negative totals into the stats node');
sleep 3;
my $ta = totals();
note "A: zk_kept_totals: $ta; stats now " . $kz->cmd("read $STATS");
my ($okn, $r) = fill(12);
my $rb = real_bytes();
note "A: $okn COMMITs of 150 kB passed, last $r->{sqlstate}; " . "really kept $rb bytes; totals " . totals();
ok($rb <= $MAX + 160_000 || $ta !~ /^enforced/ || $node->log_contains(qr/WARNING:.*zookeeper_stats/),
	"A: zklock bounds the root ($rb bytes kept), or says it no longer can (state, WARNING)");

# put it right: delete the stats node, zklock creates it again (recount)
is($kz->cmd("delete $STATS"), 'ok', 'A: the stats node deleted');
ok(wait_until(sub { ($kz->cmd("read $STATS") // '') =~ /^data count=\d+,bytes=(\d+)/ && $1 == real_bytes() }, 20),
	'A: zklock created it again and ZooKeeper counted the root afresh') or diag $kz->cmd("read $STATS");
for my $i (0 .. $qn - 1)
{
	q1("SELECT zk_queue_purge('q$i'), zk_queue_drop('q$i')");
}
ok(wait_until(sub { real_bytes() < 100_000 }, 20), 'A: queues dropped') or diag real_bytes();

#
# B. the limits node deleted: ZooKeeper stops counting
#
is($kz->cmd("delete $LIMITS"), 'ok', 'B: a client with the credentials deletes zookeeper_limits only');
sleep 3;
my $tb = totals();
($okn, $r) = fill(12);
$rb = real_bytes();
note "B: $okn COMMITs of 150 kB passed, last $r->{sqlstate}; really kept $rb bytes; stats "
  . $kz->cmd("read $STATS") . "; totals " . totals();
ok($rb <= $MAX + 160_000 || $tb !~ /^enforced/ || $node->log_contains(qr/WARNING:.*zookeeper_limits/),
	"B: zklock bounds the root ($rb bytes kept) or says it no longer can");

#
# D. with the root full (or past it): consume and drop work
#
$r = one_shot($node, "BEGIN; SELECT count(*) FROM zk_try_dequeue('q" . ($qn - 1) . "', 100); COMMIT");
is($r->{sqlstate}, '00000', 'D: a consumer takes items of a full root') or diag $r->{err};
$r = one_shot($node, "SELECT zk_queue_purge('q" . ($qn - 2) . "'), zk_queue_drop('q" . ($qn - 2) . "')");
is($r->{sqlstate}, '00000', 'D: an admin drops a queue of a full root') or diag $r->{err};

# put it right: delete the stats node, zklock makes both again (recount)
$kz->cmd("delete $STATS");
ok(wait_until(sub { ($kz->cmd("read $LIMITS") // '') =~ /^data count=-1/ && ($kz->cmd("read $STATS") // '') =~ /^data count=\d+/ }, 30),
	'D: the quota nodes made again');

#
# E. a configured namespace and a recorded one: bob's database is set by a
#    superuser to namespace 'etl' (doc/security.md's own example), carol
#    (CREATEDB) creates a database named etl, a superuser installs zklock
#    there: carol's '$database' is 'etl', claimed by nobody (configured
#    namespaces are not claimed), so she reads bob's items.
#
is(run('postgres', 'CREATE DATABASE bobdb', 'bob')->{sqlstate}, '00000', 'E: bob creates bobdb');
install('bobdb', 'bob');
run('postgres', "ALTER DATABASE bobdb SET zklock.namespace = 'etl'");
$r = run('bobdb', "SELECT current_setting('zklock.namespace'); BEGIN; SELECT zk.zk_enqueue('jobs', 'bob-secret'); COMMIT;", 'bob');
is($r->{sqlstate}, '00000', 'E: bob (namespace etl, set by a superuser) enqueues an item') or diag $r->{err};
is(run('postgres', 'CREATE DATABASE etl', 'carol')->{sqlstate}, '00000', 'E: carol creates a database named etl');
my $ie = install('etl', 'carol');
note "E: CREATE EXTENSION in carol's etl: $ie->{sqlstate} $ie->{err}";
$r = run('etl', "SELECT convert_from(payload, 'UTF8') FROM zk.zk_queue_peek('jobs', 10)", 'carol');
note "E: carol's peek: $r->{sqlstate} out '$r->{out}' $r->{err}";
ok($r->{out} !~ /bob-secret/, "E: carol's database does not reach the namespace bob's database was set to");

#
# F. concurrent COMMITs near the bound: 16 sessions commit 150 kB each at
#    once; doc/limits.md: overshoot at most the COMMITs in flight times
#    zklock.max_transaction_size
#
{
	my @s = map { new_session($node, name => "f$_", user => 'prod994') } 1 .. 16;
	my $before = real_bytes();
	$_->send(sprintf($fill, 'f' . $_->name)) for @s;
	my %st;
	for (@s) { my $x = $_->wait(120); $st{$x->{sqlstate}}++; }
	my $after = real_bytes();
	note "F: before $before bytes; after $after; outcomes " . join(', ', map { "$_: $st{$_}" } sort keys %st);
	ok($after <= $MAX + 16 * 256 * 1024, "F: within the documented overshoot ($after bytes)");
	ok(($st{'00000'} // 0) < 16, 'F: not every concurrent COMMIT passed the bound');
	$_->quit for @s;
	for (@s) { my $q = 'f' . $_->name; q1("SELECT zk_queue_purge('$q'), zk_queue_drop('$q')"); }
}

#
# G. max_kept_items under concurrency: 16 sessions commit 5 items each into
#    one queue at once, zklock.max_kept_items = 20 for the role
#
{
	$node->safe_psql('postgres', 'ALTER ROLE prod994 SET zklock.max_kept_items = 20');
	my @s = map { new_session($node, name => "g$_", user => 'prod994') } 1 .. 16;
	$_->send("BEGIN; SELECT count(zk_enqueue('g994', 'x')) FROM generate_series(1, 5); COMMIT") for @s;
	my %st;
	for (@s) { my $x = $_->wait(120); $st{$x->{sqlstate}}++; }
	my $kept = zk_count($zk, '/zklock/queues/postgres:g994/entries');
	note "G: outcomes " . join(', ', map { "$_: $st{$_}" } sort keys %st) . "; kept $kept";
	ok($kept <= 20, "G: at most max_kept_items = 20 kept ($kept)");
	$_->quit for @s;
}

#
# H. semaphores taken and released leave no pool behind; 50 names
#
{
	$node->safe_psql('postgres', q{CREATE ROLE sem994 LOGIN; SELECT zk_grant('semaphore', 'sem994')});
	my $hs = new_session($node, name => 'h', user => 'sem994');
	my $x = $hs->query(q{DO $$ BEGIN FOR i IN 1..50 LOOP
	  PERFORM zk_try_session_semaphore('h994_' || i, 2); PERFORM zk_semaphore_release('h994_' || i);
	END LOOP; END $$});
	is($x->{sqlstate}, '00000', 'H: 50 semaphores taken and released') or diag $x->{err};
	my $left;
	ok(wait_until(sub { ($left = zk_count($zk, '/zklock/semaphores')) <= 1 }, 20),
		'H: no pool left under /zklock/semaphores') or diag "left $left";
	$hs->quit;
}

#
# C. garbage in the stats node
#
my $v = $ENV{ZK_VERSION} // '3.8';
is($kz->cmd("set $STATS garbage"), 'ok', 'C: a client with the credentials writes garbage into the stats node');
$r = $p->query(sprintf($fill, 'qc'));
note "C: the producer's COMMIT: $r->{sqlstate}";
ok(defined zk_cmd($zk, 'ruok'), "C: ZooKeeper $v still serves after the next write under the root");
my $restart = eval { zk_stop($zk); zk_restart($zk); 1 };
ok($restart, "C: ZooKeeper $v starts again") or diag $@;

$p->quit;
$kz->quit;
$node->stop;
done_testing();
