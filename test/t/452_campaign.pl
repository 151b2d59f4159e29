
# 452_campaign.pl - elections SQL sessions campaign in (issue 41): sessions
# of two PostgreSQL clusters, A (through test/zkproxy.py, 6 s sessions) and B
# (20 s sessions), in one namespace, and kazoo's Election on the same path.
#
#   1. Three sessions campaign on one name: at any moment one leads, the
#      first; ZooKeeper's first contender is its node, its token that
#      node's czxid; the others wait.  Resigning hands the leadership to
#      the next in line, in order, with a greater token.
#   2. The leader's backend terminated: its candidacy goes at once (long
#      before B's 20 s session could expire); the next leads.
#   3. Transaction scope ends at COMMIT and at ROLLBACK; session scope
#      survives both; zk_try_campaign withdraws when another leads.
#   4. kazoo both ways: a kazoo Election behind a SQL leader leads once it
#      resigns; kazoo's contenders() names the SQL leader (its node data);
#      a SQL campaign behind kazoo leads once kazoo resigns, and
#      zk_campaign_candidates shows kazoo's identifier.
#   5. A's ZooKeeper session lost (its connection frozen past the session
#      timeout): A's leader says it does not lead before B's campaign
#      returns, never both; its transaction's COMMIT fails with 40001; its
#      session campaign's next call fails with 40001; a waiter on A is told
#      (08006).

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
my $pA = proxy_start($zk);
my $A = zk_node('campA', $pA->{hosts}, namespace => 'tenant', session_timeout => '6s',
	connect_timeout => '2s');
my $B = zk_node('campB', $zk, namespace => 'tenant', session_timeout => '20s',
	connect_timeout => '2s');
my $EL = $A->safe_psql('postgres', "SELECT zk_path('campaign', 'camp')");
is($EL, '/zklock/elections/tenant:camp', "the campaign's election is in the namespace");
is($B->safe_psql('postgres', "SELECT zk_path('campaign', 'camp')"), $EL, 'B has the same path');

# the contenders in line: [ { name, path, ... } ], first leads
sub line_up { return zk_lock_nodes($zk, $_[0] // $EL); }

# how many contenders are in line
sub in_line { my @n = line_up($_[0]); return scalar @n; }

sub leader_czxid
{
	my ($path) = @_;
	my @n = line_up($path);
	return @n ? zk_czxid($zk, $n[0]->{path}) : undef;
}

# a session's own view: its token while it leads, '' when it does not,
# 'error' when the call fails
sub view
{
	my ($s, $name) = @_;
	my $r = $s->query("SELECT zk_campaign_token('" . ($name // 'camp') . "')", 30);
	return $r->{sqlstate} eq '00000' ? $r->{out} : 'error';
}

#
# 1. three sessions in line; resign hands over in order
#
my $a1 = new_session($A, name => 'a1');
my $b1 = new_session($B, name => 'b1');
my $a2 = new_session($A, name => 'a2');
my $t1 = $a1->query_safe("SELECT zk_session_campaign('camp')");
$b1->send("SELECT zk_session_campaign('camp')");
ok(wait_until(sub { in_line() == 2 }, 10, 0.05), 'b1 stands behind a1');
$a2->send("BEGIN; SELECT zk_campaign('camp')");
ok(wait_until(sub { in_line() == 3 }, 10, 0.05), 'a2 stands behind b1');
is($t1, leader_czxid(), "a1 leads: its token is the first contender's czxid ($t1)");
is(view($a1), $t1, "a1's own view: it leads, with that token");
ok($b1->running && $a2->running, 'b1 and a2 wait');
is($B->safe_psql('postgres', "SELECT string_agg(state || ':' || pid, ' ' ORDER BY position) FROM zk_campaign_candidates('camp')"),
	"held:" . $a1->pid . " waiting:" . $b1->pid . " waiting:" . $a2->pid,
	'zk_campaign_candidates on B: a1 holds, b1 then a2 wait');

is($a1->query_safe("SELECT zk_resign('camp')"), 't', 'a1 resigns');
my $r = $b1->wait(10);
is($r->{sqlstate}, '00000', 'b1 leads next');
my $t2 = $r->{out};
ok($t2 > $t1, "with a greater token ($t2 > $t1)");
is($t2, leader_czxid(), "b1's token is the first contender's czxid");
is(view($a1), '', 'a1 does not lead any more');
ok($a2->running, 'a2 still waits');

#
# 2. the leader's backend terminated: its candidacy goes at once
#
my $t = time();
$B->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $b1->pid . ')');
$r = $a2->wait(15);
my $took = time() - $t;
is($r->{sqlstate}, '00000', 'b1 terminated: a2 leads');
ok($took < 15, sprintf('within %.1f s, before B\'s 20 s session could expire', $took));
my $t3 = $r->{out};
is($t3, leader_czxid(), "a2's token is the first contender's czxid");
ok(wait_until(sub { in_line() == 1 }, 10, 0.05), "b1's node is gone");
$b1->quit;

#
# 3. scopes
#
is(view($a2), $t3, 'a2 leads inside its transaction');
$a2->query_safe('COMMIT');
is(view($a2), '', 'a2 no longer leads after COMMIT');
ok(wait_until(sub { in_line() == 0 }, 10, 0.05), 'its node is gone');
$a2->query_safe("BEGIN; SELECT zk_campaign('camp')");
$a2->query_safe('ROLLBACK');
ok(wait_until(sub { in_line() == 0 }, 10, 0.05), 'a campaign is let go at ROLLBACK');
my $ts = $a1->query_safe("SELECT zk_session_campaign('camp')");
$a1->query_safe('BEGIN; SELECT 1; COMMIT; BEGIN; SELECT 1; ROLLBACK');
is(view($a1), $ts, 'a session campaign survives COMMIT and ROLLBACK');
my $b2 = new_session($B, name => 'b2');
is($b2->query_safe("SELECT zk_try_campaign('camp')"), 'f', 'zk_try_campaign on B: a1 leads');
is($b2->query_safe("SELECT zk_try_session_campaign('camp')"), 'f', 'zk_try_session_campaign on B too');
ok(wait_until(sub { in_line() == 1 }, 10, 0.05), 'the tries withdrew (one contender left)');

#
# 4. kazoo both ways
#
my $k = kazoo_process($zk, $ZkLockTest::PYTHON, "$ZkLockTest::SRC/test/election_kazoo.py",
	$zk->{hosts}, $EL, 'py-candidate');
is($k->read_line(30), 'ready', 'kazoo candidate connected');
is($k->cmd('run'), 'standing', 'kazoo stands behind a1');
ok(wait_until(sub { in_line() == 2 }, 10, 0.05), 'ZooKeeper: two contenders');
my ($out, $err) = run_command([ $ZkLockTest::PYTHON, '-c', <<'PY', $zk->{hosts}, $EL ]);
import json, sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1]); zk.start(10)
c = zk.Election(sys.argv[2]).contenders()
print(json.loads(c[0])["pid"], c[1])
zk.stop()
PY
is($out, $a1->pid . ' py-candidate', "kazoo's contenders(): a1 (its pid in its node) leads, kazoo next")
  or diag $err;
is($A->safe_psql('postgres', "SELECT coalesce(data, 'none') FROM zk_campaign_candidates('camp') WHERE state = 'waiting'"),
	'py-candidate', "zk_campaign_candidates: kazoo's identifier waits");
is($a1->query_safe("SELECT zk_resign('camp')"), 't', 'a1 resigns');
is($k->read_line(10), 'leading', 'kazoo leads');
is($b2->query_safe("SELECT zk_try_campaign('camp')"), 'f', 'b2 cannot lead behind kazoo');
$b2->send("SELECT zk_session_campaign('camp')");
ok(wait_until(sub { in_line() == 2 }, 10, 0.05), 'b2 stands behind kazoo');
is($A->safe_psql('postgres', "SELECT data FROM zk_campaign_candidates('camp') WHERE state = 'held'"),
	'py-candidate', "zk_campaign_candidates: kazoo's identifier leads");
ok($b2->running, 'b2 waits');
is($k->cmd('resign'), 'resigned', 'kazoo resigns');
$r = $b2->wait(10);
is($r->{sqlstate}, '00000', 'b2 leads');
is($r->{out}, leader_czxid(), "with the first contender's czxid");
$k->quit;
$b2->query_safe("SELECT zk_resign('camp')");

#
# 5. A's ZooKeeper session lost
#
my $E2 = $A->safe_psql('postgres', "SELECT zk_path('campaign', 'camp2')");
my $a3 = new_session($A, name => 'a3');
my $b3 = new_session($B, name => 'b3');
my $tl = $a1->query_safe("SELECT zk_session_campaign('camp2')");
$a2->query_safe("BEGIN; SELECT zk_campaign('camp3')");
$a3->send("SELECT zk_campaign('camp2')");
$b3->send("SELECT zk_session_campaign('camp2')");
ok(wait_until(sub { in_line($E2) == 3 }, 10, 0.05), 'a1 leads camp2, a3 and b3 wait');
proxy_cmd($pA, 'freeze');
$t = time();
my ($a1_not, $b3_leads, $both) = (undef, undef, 0);
while (time() - $t < 30)
{
	my $v = view($a1, 'camp2');
	$a1_not //= time() - $t if $v ne $tl;
	if (!$b3->running)
	{
		$b3_leads = time() - $t;
		$both++ unless defined $a1_not;
		last;
	}
	$both++ if $v eq $tl && !$b3->running;
	sleep 0.1;
}
ok(defined $a1_not && $a1_not < 5.5,
	sprintf('a1 says it does not lead before its 6 s session could expire (%.1f s)', $a1_not // -1));
ok(defined $b3_leads, sprintf('b3 leads once A\'s session expired (%.1f s)', $b3_leads // -1));
is($both, 0, 'never both');
$r = $b3->wait(1);
is($r->{sqlstate}, '00000', "b3's campaign returned a token");
is($r->{out}, leader_czxid($E2), "b3's token is camp2's first contender's czxid");
$r = $a3->wait(15);
is($r->{sqlstate}, '08006', "a3, waiting on A, is told (08006)") or diag $r->{err};
proxy_cmd($pA, 'thaw');
ZkLockTest::wait_connected($A, 'A did not reconnect');
$r = $a2->query('COMMIT', 30);
is($r->{sqlstate}, '40001', "a2's COMMIT fails: its leadership of camp3 was lost");
like($r->{err}, qr/leadership of zookeeper election "camp3" was lost before commit/, 'and says so');
$r = $a1->query("SELECT zk_campaign_token('camp2')", 30);
is($r->{sqlstate}, '40001', "a1's next call fails: its session campaign was lost");
like($r->{err}, qr/leadership of zookeeper election "camp2" was lost/, 'and says so');
is(view($a1, 'camp2'), '', 'once told, a1 is no longer campaigning');
is($b3->query_safe("SELECT zk_campaign_token('camp2')"), leader_czxid($E2), 'b3 still leads');

$_->quit foreach ($a1, $a2, $a3, $b2, $b3);
$_->stop('fast', fail_ok => 1) foreach ($A, $B);
proxy_stop($pA);
zk_stop($zk);
note sprintf('452_campaign: %.1fs', time() - $T0);
done_testing();
