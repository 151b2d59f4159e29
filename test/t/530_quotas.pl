
# 530_quotas.pl - quotas and bounds (issue 23): no session can take the
# table of entries from the others, the worker keeps a reserve, and a lease
# cannot outlast zklock.max_lease_duration.
#
# zklock.max_locks = 64 (so zklock.max_locks_per_backend defaults to 16)
# and zklock.elections = 'q530' (so the worker's reserve is
# min(8 + 1, 64 / 4) = 9 entries).
#
#   1. The hog: one session takes session locks until refused: it gets 16,
#      then 53200 with the hint; ZooKeeper holds exactly 16 of its nodes.
#      Meanwhile other sessions lock, enqueue and COMMIT, read
#      zk_lock_holders, the worker leads 'q530' and, once a second
#      election is listed by reload, stands in it and leads it too.
#   2. The hog's session ends: its count comes back (a new session takes
#      16 again); a superuser's SET lowers its own quota; a role that is
#      not superuser cannot SET the setting (42501); ALTER ROLE ... SET
#      gives a role's sessions a lower quota.
#   2b. The role's quota: two sessions of a role with ALTER ROLE ... SET
#      zklock.max_locks_per_role = 10 get 10 together (6 + 4), then 53200
#      naming the role; another role and a superuser are not charged; the
#      role cannot raise it (42501); once one session ends, the other takes
#      what it gave back.
#   3. The reserve: four hogs together stop when only the reserve is left
#      (53200, "kept for the zklock worker"), entries_used stays
#      max_locks - reserve, and the worker can still stand in a third
#      election and lead it.
#   4. Lease maximum: the default is 1 day; '1 day 1 second' fails with
#      22023 and creates nothing in ZooKeeper; '1 day' works; SET (by a
#      superuser) to 1 hour refuses '2 hours'; 0 means no limit but the
#      100 years; a role that is not superuser cannot SET it.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('quotas', $zk,
	connect_timeout => '5s',
	conf => "zklock.max_locks = 64\nzklock.elections = 'q530'\n");

sub q1 { return out_or_error($node, $_[0]); }

sub leads
{
	my ($name) = @_;
	return q1("SELECT zk_is_leader('$name')");
}

# entries_used, read from zk_status()
sub used { return zk_status_value($node, 'entries_used'); }

# contender nodes in ZooKeeper of the locks whose names start with $prefix
sub held_nodes
{
	my ($prefix) = @_;
	my $n = 0;
	$n += zk_count($zk, "/zklock/locks/$_") foreach grep { /^\Q$prefix\E/ } zk_children($zk, '/zklock/locks');
	return $n;
}

is(q1('SHOW zklock.max_locks_per_backend'), '16', 'zklock.max_locks_per_backend defaults to a quarter of max_locks (16)');
is(q1('SHOW zklock.max_lease_duration'), '1d', 'zklock.max_lease_duration defaults to 1 day');
ok(wait_until(sub { leads('q530') eq 't' }, 30, 0.2), "the worker leads election 'q530'");
my $base = used();
is($base, '1', 'entries_used: the worker\'s candidacy only');

create_hog($node);    # hog(tag, max): session locks until refused (ZkLockTest.pm)

#
# 1. the hog
#
my $hog = new_session($node, name => 'hog');
my $out = $hog->query_safe("SELECT hog('hogA-')", 120);
my ($n, $st, $msg, $det, $hint) = split /\|/, $out, 5;
is($n, 16, 'the hog got its share: 16 session locks') or diag $out;
is($st, '53200', 'then 53200');
is($msg, 'this session uses too many zklock entries', 'message');
like($det // '', qr/holds or awaits 16 entries.*zklock\.max_locks_per_backend is 16\./, 'detail gives the numbers');
like($hint // '', qr/^Release locks .*raise zklock\.max_locks_per_backend\.$/, 'hint: release locks, or raise the setting');
is(held_nodes('hogA-'), 16, 'ZooKeeper holds exactly 16 of its nodes');
is(used(), $base + 16, 'entries_used: 16 more');
is(q1("SELECT kind || ' ' || state || ' ' || count(*) FROM zk_entries WHERE pid = " . $hog->pid . ' GROUP BY kind, state'),
	'lock held 16', 'zk_entries shows them: 16 locks held by the hog\'s pid');
is(q1('SELECT count(*) FROM zk_entries'), $base + 16, 'zk_entries has a row for every entry used');

my $o = new_session($node, name => 'other');
$o->query_safe('BEGIN');
my $r = $o->query("SELECT zk_lock('other530', '5s')", 30);
is($r->{sqlstate}, '00000', 'meanwhile another session locks') or diag $r->{err};
$r = $o->query("SELECT count(*) FROM zk_lock_holders('hogA-0')", 30);
is($r->{sqlstate} . ' ' . $r->{out}, '00000 1', "and reads zk_lock_holders('hogA-0'): the hog") or diag $r->{err};
$r = $o->query("SELECT zk_enqueue('q530', 'item')", 30);
is($r->{sqlstate}, '00000', 'and enqueues') or diag $r->{err};
$r = $o->query('COMMIT', 30);
is($r->{sqlstate}, '00000', 'and commits') or diag $r->{err};
is(zk_count($zk, '/zklock/queues/q530/entries'), 1, 'the item is in ZooKeeper');
is(held_nodes('other530'), 0, 'its lock went at COMMIT');
is(leads('q530'), 't', "the worker still leads 'q530'");
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.elections = 'q530, q530b'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok(wait_until(sub { leads('q530b') eq 't' }, 30, 0.2), "the worker stands in a second election 'q530b' and leads it");
is(zk_count($zk, '/zklock/elections/q530b'), 1, 'its candidate node is in ZooKeeper');
$o->quit;

#
# 2. the hog's session ends: its count comes back
#
$base = $base + 1;				# the second candidacy
$hog->quit;
ok(wait_until(sub { used() eq $base }, 20, 0.2), "entries_used back to $base once the hog's session ended")
  or diag 'entries_used ' . used();
is(held_nodes('hogA-'), 0, "none of the hog's nodes left in ZooKeeper");
$hog = new_session($node, name => 'hog2');
$out = $hog->query_safe("SELECT hog('hogB-')", 120);
like($out, qr/^16\|53200\|/, 'a new session takes its 16 again') or diag $out;
$hog->query_safe('SELECT zk_unlock_all()');
ok(wait_until(sub { used() eq $base }, 20, 0.2), "unlocked: entries_used back to $base");
$out = $hog->query_safe("SELECT hog('hogC-')", 120);
like($out, qr/^16\|53200\|/, 'the same session, its locks released, takes 16 again') or diag $out;
$hog->query_safe('SELECT zk_unlock_all()');
$hog->query_safe('SET zklock.max_locks_per_backend = 3');
$out = $hog->query_safe("SELECT hog('hogD-')", 120);
like($out, qr/^3\|53200\|.*zklock\.max_locks_per_backend is 3\./, 'a superuser session with SET ... = 3 gets 3') or diag $out;
$hog->query_safe('SELECT zk_unlock_all()');
$hog->quit;
$r = one_shot($node, 'CREATE ROLE r530; SET ROLE r530; SET zklock.max_locks_per_backend = 100');
is($r->{sqlstate}, '42501', 'a role that is not superuser cannot raise its quota (42501)') or diag $r->{err};
$r = one_shot($node, 'SET ROLE r530; SET zklock.max_lease_duration = 0');
is($r->{sqlstate}, '42501', 'nor the lease maximum (42501)') or diag $r->{err};
$node->safe_psql('postgres', "ALTER ROLE r530 LOGIN; SELECT zk_grant('lock', 'r530'); "
	  . 'ALTER ROLE r530 SET zklock.max_locks_per_backend = 2');
my ($rc, $rout, $rerr) = $node->psql('postgres', "SELECT hog('role-')", extra_params => [ '-U', 'r530' ]);
like($rout, qr/^2\|53200\|.*zklock\.max_locks_per_backend is 2\./,
	'ALTER ROLE r530 SET zklock.max_locks_per_backend = 2: its session gets 2') or diag "$rout $rerr";
ok(wait_until(sub { used() eq $base }, 20, 0.2), "entries_used back to $base");

#
# 2b. the role's quota: sessions of one role together
#
is(q1('SHOW zklock.max_locks_per_role'), '16', 'zklock.max_locks_per_role defaults to a quarter of max_locks (16)');
$node->safe_psql('postgres', "CREATE ROLE r530b LOGIN; SELECT zk_grant('lock', 'r530b'); "
	  . 'ALTER ROLE r530b SET zklock.max_locks_per_role = 10');
my $ra = new_session($node, name => 'roleA', user => 'r530b');
my $rb = new_session($node, name => 'roleB', user => 'r530b');
$out = $ra->query_safe("SELECT hog('roleA-', 6)", 120);
is($out, '6|none', "one session of r530b takes 6") or diag $out;
$out = $rb->query_safe("SELECT hog('roleB-')", 120);
my ($nb, $stb, $msgb, $detb, $hintb) = split /\|/, $out, 5;
is($nb, 4, 'its second session gets 4 more: 10 for the role together') or diag $out;
is($stb, '53200', 'then 53200');
is($msgb, 'role "r530b" uses too many zklock entries', 'message names the role');
like($detb // '', qr/^The role's sessions hold or await 10 entries together; zklock\.max_locks_per_role is 10\.$/,
	'detail gives the numbers') or diag $detb;
like($hintb // '', qr/raise zklock\.max_locks_per_role/, 'hint: release, or raise the setting');
is(held_nodes('roleA-') + held_nodes('roleB-'), 10, 'ZooKeeper holds exactly 10 of the role\'s nodes');
($rc, $rout, $rerr) = $node->psql('postgres', "SELECT hog('role2-', 3)", extra_params => [ '-U', 'r530' ]);
like($rout, qr/^2\|53200\|this session uses too many zklock entries\|/,
	'another role is not charged for r530b (only its own per-backend 2 apply)') or diag "$rout $rerr";
$node->psql('postgres', 'SELECT zk_unlock_all()', extra_params => [ '-U', 'r530' ]);
$r = one_shot($node, "SELECT zk_try_lock('su-while-r530b-full')");
is($r->{sqlstate}, '00000', 'nor is a superuser') or diag $r->{err};
$r = one_shot($node, 'SET ROLE r530b; SET zklock.max_locks_per_role = 100');
is($r->{sqlstate}, '42501', 'a role that is not superuser cannot raise its role quota (42501)') or diag $r->{err};
$ra->quit;
ok(wait_until(sub { held_nodes('roleA-') == 0 }, 20, 0.2), "the first session's nodes went when it ended");
$out = $rb->query_safe("SELECT hog('roleC-')", 120);
like($out, qr/^6\|53200\|role "r530b"/, 'then the second session takes the 6 it gave back') or diag $out;
$rb->query_safe('SELECT zk_unlock_all()');
$rb->quit;
ok(wait_until(sub { used() eq $base }, 20, 0.2), "entries_used back to $base");

#
# 3. the reserve: four hogs together
#
my $reserve = 8 + 2;			# two elections listed; 64 / 4 = 16 is larger
my @hogs = map { new_session($node, name => "h$_") } 1 .. 4;
my @got;
foreach my $i (0 .. $#hogs)
{
	my $rr = $hogs[$i]->query_safe("SELECT hog('r$i-')", 120);
	push @got, $rr;
}
my $expect_last = 64 - $reserve - $base - 3 * 16;
is(join(' ', map { (split /\|/)[0] } @got), "16 16 16 $expect_last",
	"four sessions: 16, 16, 16, then $expect_last (64 entries - reserve $reserve - $base candidacies - 48)")
  or diag join("\n", @got);
my ($n4, $st4, $msg4, $det4, $hint4) = split /\|/, $got[3], 5;
is($st4, '53200', 'the last is refused with 53200');
is($msg4, 'out of zklock lock entries', 'message');
like($det4 // '', qr/^54 of the 64 entries of zklock\.max_locks are in use; the last 10 are kept for the zklock worker\.$/,
	'detail: the reserve of 10') or diag $det4;
like($hint4 // '', qr/increase zklock\.max_locks/, 'hint: raise zklock.max_locks');
is(used(), 64 - $reserve, "entries_used is 64 - $reserve");
$r = one_shot($node, "SELECT zk_try_lock('one-more')");
is($r->{sqlstate}, '53200', 'a fifth session is refused too') or diag $r->{err};
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.elections = 'q530, q530b, q530c'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok(wait_until(sub { leads('q530c') eq 't' }, 30, 0.2), "the worker still stands in a third election 'q530c' and leads it");
is(used(), 64 - $reserve + 1, 'from its reserve');
is(leads('q530') . leads('q530b'), 'tt', 'and still leads the other two');
$_->quit foreach @hogs;
ok(wait_until(sub { used() eq '3' }, 20, 0.2), 'the hogs gone: entries_used is 3 (the candidacies)')
  or diag 'entries_used ' . used();
is(held_nodes('r'), 0, "none of the hogs' nodes left in ZooKeeper");

#
# 4. lease maximum
#
$r = one_shot($node, "SELECT zk_try_lease('l530', '1 day 1 second')");
is($r->{sqlstate}, '22023', 'a lease of 1 day 1 second: 22023') or diag $r->{err};
like($r->{err}, qr/zklock lease duration exceeds zklock\.max_lease_duration/, 'message');
like($r->{err}, qr/zklock\.max_lease_duration is 86400 seconds/, 'detail gives the maximum');
like($r->{err}, qr/HINT:.*renew it before it ends/, 'hint: a shorter lease, renewed');
is(zk_exists($zk, '/zklock/leases/l530') ? 'exists' : 'none', 'none', 'nothing created in ZooKeeper');
is(q1("SELECT zk_try_lease('l530', '1 day')"), 't', 'a lease of exactly 1 day is taken');
is(zk_exists($zk, '/zklock/leases/l530/lease_holder') ? 'exists' : 'none', 'exists', 'its holder node is in ZooKeeper');
$r = one_shot($node, "SET zklock.max_lease_duration = '1h'; SELECT zk_try_lease('l530h', '2 hours')");
is($r->{sqlstate}, '22023', "SET zklock.max_lease_duration = '1h': 2 hours refused (22023)") or diag $r->{err};
is(zk_exists($zk, '/zklock/leases/l530h') ? 'exists' : 'none', 'none', 'nothing created');
is(q1("SET zklock.max_lease_duration = 0; SELECT zk_try_lease('l530z', '50 years')"), 't',
	'0: no limit but the 100 years (50 years taken)');
$r = one_shot($node, "SET zklock.max_lease_duration = 0; SELECT zk_try_lease('l530z', '101 years')");
is($r->{sqlstate}, '22023', '0: 101 years still refused') or diag $r->{err};

$node->stop;
done_testing();
