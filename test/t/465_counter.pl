
# 465_counter.pl - zk_counter_* across two PostgreSQL clusters A and B and
# kazoo's own Counter, on one ZooKeeper: no lost update, no duplicate, adds
# combined, foreign data refused and left alone (issue 41).
#
#   1. Layout, both ways: the node zk_path('counter', name) names holds the
#      value in ASCII decimal; kazoo reads what SQL added and SQL what kazoo
#      added; a node kazoo made empty (its ensure_path) counts from 0.
#   2. 32 sessions (16 on A, 16 on B) add at once, each ADDS times, while a
#      kazoo Counter adds on the same node: the final value is the sum of
#      every delta, and every value returned (SQL and kazoo) is distinct.
#      The node's version (one per write) is well below the number of SQL
#      adds: the workers combined their backends' adds.  Without the
#      versioned write (a set at version -1) adds are lost and this fails.
#   3. Data another client wrote that is not a decimal integer (words,
#      blanks, a '+', too long, past bigint) fails every call with a clear
#      SQLSTATE and is left as it is; zk_counter_drop removes it.
#   4. bigint's end, written by kazoo: an add past it fails with 22003 and
#      writes nothing; a compare-and-set between SQL and kazoo.  A counter
#      dropped and created again by B: A's add reads it again (versions
#      restart at 0) and adds to what B wrote.
#   5. Lost replies, through the fault proxy (cluster C): a setData (and a
#      create) that landed but whose reply was lost fails with 08006 (another
#      client adding as much from that version would have left the same
#      node: the value is never handed out) and counts once; one held back by the proxy and failed with
#      the connection is sent again at the same version; one that landed
#      while kazoo wrote after it before C could read again fails with 08006
#      (may or may not have been applied), and nothing is counted twice.
#      A statement cancelled while its write is held: the write goes once
#      the connection is back, and its entry is freed then.
#   6. A role granted the counter group: its adds are charged to its write
#      rate; it may not drop.
#   7. Namespaces: a name in two namespaces is two counters.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $T0 = time();
my $zk = zk_start();
my $A = zk_node('cntA', $zk);
my $B = zk_node('cntB', $zk);

sub path_of { return $A->safe_psql('postgres', "SELECT zk_path('counter', '$_[0]')"); }

sub kazoo_counter { return kazoo_driver($zk, 'counter_kazoo.py', path_of($_[0])); }

#
# 1. layout, both ways
#
my $P = path_of('c1');
is($P, '/zklock/counters/c1', 'zk_path names the counter node');
is($A->safe_psql('postgres', "SELECT zk_counter_add('c1', 5)"), '5', 'A adds 5');
is(zk_get($zk, $P), '5', 'the node holds "5"');
my $k = kazoo_counter('c1');
is($k->cmd('get'), 'value 5', 'kazoo reads what SQL added');
is($k->cmd('add 3'), 'value 8', 'kazoo adds 3');
is($B->safe_psql('postgres', "SELECT zk_counter_get('c1')"), '8', 'B reads what kazoo added');
is($B->safe_psql('postgres', "SELECT zk_counter_add('c1', -10)"), '-2', 'B subtracts');
is($k->cmd('get'), 'value -2', 'kazoo reads a negative value');
$k->quit;

my $k0 = kazoo_counter('c0');
is($k0->cmd('get'), 'value 0', "kazoo's counter on a new path");
is($k0->cmd('data'), 'data', 'kazoo made it with empty data');
is($A->safe_psql('postgres', "SELECT zk_counter_get('c0')"), '0', 'empty data is 0');
is($A->safe_psql('postgres', "SELECT zk_counter_add('c0', 2)"), '2', 'and adds from 0');
$k0->quit;

#
# 2. 32 sessions on two clusters and kazoo, on one counter
#
my $SESSIONS = 16;
my $ADDS = 40;
my $HOT = 'hot';
my $HP = path_of($HOT);
my @sessions;
for my $i (1 .. $SESSIONS)
{
	push @sessions, [ new_session($A, name => "a$i"), $i ];
	push @sessions, [ new_session($B, name => "b$i"), 100 + $i ];
}
my $kh = kazoo_counter($HOT);
my $t = time();
# every session adds its own delta ADDS times in a row, as fast as it can
for my $s (@sessions)
{
	my ($sess, $delta) = @$s;
	$sess->send("SELECT string_agg(zk_counter_add('$HOT', $delta)::text, ',') FROM generate_series(1, $ADDS)");
}
$kh->send("adds 100 1000");
my %seen;
my $dups = 0;
my $failed = 0;
my $want = 0;
for my $s (@sessions)
{
	my ($sess, $delta) = @$s;
	my $r = $sess->wait(120);
	if (!$r->{done} || $r->{sqlstate} ne '00000')
	{
		$failed++;
		diag("session $sess->{name}: " . ($r->{err} // 'no answer'));
		next;
	}
	$want += $delta * $ADDS;
	for my $v (split /,/, $r->{out})
	{
		$dups++ if $seen{$v}++;
	}
}
my $kline = $kh->read_line(120) // 'no answer';
like($kline, qr/^values /, 'kazoo made its 100 adds meanwhile') or diag($kline);
if ($kline =~ /^values (.*)$/)
{
	$want += 100 * 1000;
	for my $v (split /,/, $1)
	{
		$dups++ if $seen{$v}++;
	}
}
my $secs = time() - $t;
is($failed, 0, '32 sessions made their adds without an error');
is($dups, 0, 'every value returned is distinct (no add counted twice)');
is(scalar(keys %seen), 2 * $SESSIONS * $ADDS + 100, 'one value per add');
is($A->safe_psql('postgres', "SELECT zk_counter_get('$HOT')"), $want,
	'the final value is the sum of every delta (no lost update)');
is($kh->cmd('get'), "value $want", 'kazoo sees the same sum');
my ($version) = ($kh->cmd('version') =~ /^version (\d+)$/);
my $sql_adds = 2 * $SESSIONS * $ADDS;
note sprintf('%d SQL adds and 100 kazoo adds in %.1f s: %d writes of the node',
	$sql_adds, $secs, $version // -1);
ok(defined $version && $version - 100 < $sql_adds * 0.75,
	'the workers combined adds: fewer writes than SQL adds')
  or diag('version ' . ($version // 'unknown'));
$_->[0]->quit for @sessions;

#
# 3. foreign data: refused with a clear error, left as it is
#
my $kg = kazoo_counter('garbage');
my %bad = (
	'12 apples' => 'XX001',
	' 7' => 'XX001',
	'+5' => 'XX001',
	'1_000' => 'XX001',
	'0x10' => 'XX001',
	'-' . ('9' x 70) => 'XX001',
	'99999999999999999999' => '22003',
	'-9223372036854775809' => '22003',
);
for my $data (sort keys %bad)
{
	is($kg->cmd("raw $data"), 'set', "kazoo writes '$data'");
	for my $sql ("SELECT zk_counter_add('garbage')", "SELECT zk_counter_get('garbage')",
		"SELECT zk_counter_set('garbage', 1, 0)")
	{
		my $r = one_shot($A, $sql);
		is($r->{sqlstate}, $bad{$data}, "'$data': $sql fails with $bad{$data}");
	}
	my $r = one_shot($B, "SELECT zk_counter_add('garbage', 1)");
	like($r->{err}, qr/HINT:.*zk_counter_drop/s, "'$data': the hint says what to do");
	is($kg->cmd('data'), "data $data", "'$data' is left as it is");
}
is($A->safe_psql('postgres', "SELECT zk_counter_drop('garbage')"), 't', 'zk_counter_drop removes it');
ok(!zk_exists($zk, path_of('garbage')), 'the node is gone');
is($A->safe_psql('postgres', "SELECT zk_counter_add('garbage')"), '1', 'and the counter starts again');
$kg->quit;

#
# 4. bigint's end; compare-and-set against kazoo
#
my $kb = kazoo_counter('big');
$kb->cmd('raw 9223372036854775806');
is($A->safe_psql('postgres', "SELECT zk_counter_add('big')"), '9223372036854775807',
	'an add reaches bigint\'s end');
my $r = one_shot($A, "SELECT zk_counter_add('big')");
is($r->{sqlstate}, '22003', 'an add past it fails with 22003');
is($kb->cmd('data'), 'data 9223372036854775807', 'nothing written');
is($kb->cmd('add -7'), 'value 9223372036854775800', 'kazoo goes on from it');
is($B->safe_psql('postgres', "SELECT zk_counter_set('big', 1, 9223372036854775807)"), 'f',
	'a compare-and-set that expects the old value is refused');
is($B->safe_psql('postgres', "SELECT zk_counter_set('big', 1, 9223372036854775800)"), 't',
	'one that expects what kazoo wrote is done');
is($kb->cmd('get'), 'value 1', 'kazoo reads it');
$kb->quit;

# A counter dropped and created again elsewhere restarts at version 0: A's
# next add must not be written at the version its own last write left
# (found by the model tester: A's add landed on B's new node, as if B's set
# had never been, and returned -49 instead of 9223372036854775802)
is($A->safe_psql('postgres', "SELECT zk_counter_set('again', -46, 0)"), 't', 'A creates a counter at -46');
is($B->safe_psql('postgres', "SELECT zk_counter_drop('again')"), 't', 'B drops it');
is($B->safe_psql('postgres', "SELECT zk_counter_set('again', 1000, 0)"), 't',
	'B creates it again at 1000 (version 0, as A last left it)');
is($A->safe_psql('postgres', "SELECT zk_counter_add('again', -3)"), '997',
	'A adds to what B wrote, not to what A last knew');
is(zk_get($zk, path_of('again')), '997', 'the node holds 997');

#
# 5. lost replies
#
my $p = proxy_start($zk);
my $C = zk_node('cntC', $p->{hosts}, session_timeout => '10s', connect_timeout => '10s');
my $sid = zk_status_value($C, 'session_id');
is($C->safe_psql('postgres', "SELECT zk_counter_add('lost', 1)"), '1', 'C adds 1');
my $rule = proxy_rule($p, 'cut-after-request setData');
$r = one_shot($C, "SELECT zk_counter_add('lost', 10)");
ok(proxy_wait_fired($p, $rule, 10), 'the connection was cut after the setData reached ZooKeeper');
# the node holds what the add would leave, but another client adding as
# much from that version would leave the same: in doubt, never the value
is($r->{sqlstate}, '08006', 'the add whose reply was lost fails as in doubt') or diag($r->{out} . $r->{err});
like($r->{err}, qr/may or may not have been applied/, 'its detail says it may have been applied');
my $kl = kazoo_counter('lost');
is($kl->cmd('get'), 'value 11', 'added once');
is($kl->cmd('version'), 'version 1', 'one write after the create');

$rule = proxy_rule($p, 'cut-after-request create');
$r = one_shot($C, "SELECT zk_counter_add('lost_create', 5)");
ok(proxy_wait_fired($p, $rule, 10), 'the connection was cut after the create reached ZooKeeper');
is($r->{sqlstate}, '08006', 'the create whose reply was lost fails as in doubt') or diag($r->{out} . $r->{err});
is(zk_get($zk, path_of('lost_create')), '5', 'created once, with its value');

# held back by the proxy, then failed with the connection: sent again
$rule = proxy_rule($p, 'drop-requests setData');
my $x = new_session($C, name => 'held');
$x->send("SELECT zk_counter_add('lost', 100)");
sleep 1;
is($kl->cmd('get'), 'value 11', 'the setData is held back');
proxy_cmd($p, 'reset');
proxy_cmd($p, 'cut-all');
$r = $x->wait(30);
is($r->{out}, '111', 'after the connection came back the same write went again') or diag $r->{err};
is($kl->cmd('get'), 'value 111', 'added once');
$x->quit;

# a statement cancelled while its write is held back: it goes when the
# connection is back (documented), and its entry is freed then
$rule = proxy_rule($p, 'drop-requests setData');
$r = one_shot($C, "SET statement_timeout = '1s'; SELECT zk_counter_add('lost', 7)");
is($r->{sqlstate}, '57014', 'an add cancelled by statement_timeout while its write is held');
proxy_cmd($p, 'reset');
proxy_cmd($p, 'cut-all');
ok(wait_until(sub { $kl->cmd('get') eq 'value 118' }, 15, 0.2),
	'its write went once the connection was back (like nextval, not undone)');
ok(wait_until(sub { zk_status_value($C, 'entries_used') eq '0' }, 10, 0.1),
	'its entry was freed once its write was answered');
is($C->safe_psql('postgres', "SELECT zk_counter_add('lost', 1)"), '119', 'and the counter goes on');

# landed, then kazoo wrote before C could read again: nobody can tell
proxy_cmd($p, 'refuse 3');
$rule = proxy_rule($p, 'cut-after-request setData');
$x = new_session($C, name => 'ambiguous');
$x->send("SELECT zk_counter_add('lost', 1000)");
ok(proxy_wait_fired($p, $rule, 10), 'cut after the setData reached ZooKeeper');
is($kl->cmd('add 1'), 'value 1120', 'kazoo adds after it, while C is cut off');
$r = $x->wait(30);
is($r->{sqlstate}, '08006', 'the add fails as in doubt') or diag($r->{out} . $r->{err});
like($r->{err} // '', qr/may or may not have been applied/, 'and says so');
$x->quit;
is($kl->cmd('get'), 'value 1120', 'nothing counted twice');
is(zk_status_value($C, 'session_id'), $sid, 'all in one session');
ok(wait_until(sub { zk_status_value($C, 'entries_used') eq '0' }, 10, 0.1), 'C: no shared-memory entry left');
$kl->quit;
$C->stop('fast');
proxy_stop($p);

#
# 6. a role granted the counter group: its writes count against its write rate
#
$A->safe_psql('postgres', "CREATE ROLE cnt_user LOGIN; SELECT zk_grant('counter', 'cnt_user')");
# the rate is charged to the session's user (quota.c): a session of cnt_user's own
my $cu = new_session($A, name => 'cnt_user', user => 'cnt_user');
$r = $cu->query("SELECT zk_counter_add('quota') FROM generate_series(1, 20)", 60);
is($r->{sqlstate}, '00000', 'the counter group adds') or diag $r->{err};
$r = $cu->query("SELECT zk_counter_drop('quota')", 60);
is($r->{sqlstate}, '42501', 'zk_counter_drop is not in the counter group');
$cu->quit;
is($A->safe_psql('postgres', "SELECT bytes_written >= 20 * 128 FROM zk_quotas WHERE role = 'cnt_user'"), 't',
	"its adds are charged to the role's zklock.max_write_rate");

#
# 7. namespaces: two databases in two namespaces keep two counters of a name
#
for my $db ('app', 'billing')
{
	$A->safe_psql('postgres', "CREATE DATABASE $db");
	$A->safe_psql('postgres', "ALTER DATABASE $db SET zklock.namespace = '$db'");
	$A->safe_psql($db, 'CREATE EXTENSION zklock');
}
is($A->safe_psql('app', "SELECT zk_path('counter', 'n')"), '/zklock/counters/app:n', 'app: its counter path');
is($A->safe_psql('app', "SELECT zk_counter_add('n', 3)"), '3', 'app adds 3');
is($A->safe_psql('billing', "SELECT zk_counter_add('n', 5)"), '5', "billing's counter n is not app's");
is(zk_get($zk, '/zklock/counters/app:n') . ',' . zk_get($zk, '/zklock/counters/billing:n'), '3,5',
	'ZooKeeper: one node per namespace');
is($A->safe_psql('postgres', "SELECT zk_counter_get('app:n')"), '0',
	'a root-namespace name with ":" is another counter');

ok(time() - $T0 < 300, sprintf('the test ran in %.0f s', time() - $T0));
$A->stop;
$B->stop;
done_testing();
