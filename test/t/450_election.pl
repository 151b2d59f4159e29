
# 450_election.pl - leader election held by the worker (zklock.elections) on
# two PostgreSQL clusters A (through test/zkproxy.py) and B, and a kazoo
# Election candidate on the same path, checked through ZooKeeper.
#
#   1. Both stand in 'cron': exactly one leads; zk_leader agrees on both
#      and names it, with the token of its node.
#   2. A kazoo candidate stands behind them.  The leader's connection is
#      frozen (A's, through the proxy): zk_is_leader on A turns false
#      within 2/3 of the session timeout, before the session expires, and
#      the two clusters never both say true; B leads once A's session
#      expired.  After the thaw A stands again, behind.
#   3. B stopped (immediate): the kazoo candidate leads; neither cluster
#      says true; zk_leader shows kazoo's identifier.  kazoo resigns: A leads.
#   4. The setting reloaded without 'cron' withdraws A's candidacy (its
#      node goes, B leads); with it again, A stands.  A bad value is refused.
#   5. A streaming standby with the same setting does not stand; promoted,
#      it does, behind B.
#   6. Bad input to zk_is_leader: 22004, 22023.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $T0 = time();
my $zk = zk_start();
my $EL = '/zklock/elections/cron';
my %opts = (session_timeout => '6s', connect_timeout => '2s',
	conf => "zklock.elections = 'cron, other'\n");
my $pA = proxy_start($zk);
my $A = zk_streaming_node('elA', $pA->{hosts}, %opts);
ok(wait_until(sub { zk_is_leader($A) eq 't' }, 20, 0.1), 'A, alone, leads');
my $B = zk_node('elB', $zk, %opts);
my %node = (A => $A, B => $B);

sub zk_is_leader
{
	my ($n) = @_;
	my ($rc, $out) = $n->psql('postgres', "SELECT zk_is_leader('cron')", on_error_die => 0);
	return $rc == 0 ? $out : "error";
}

sub candidates { return scalar(zk_children($zk, $EL)); }

#
# 1. exactly one leads
#
ok(wait_until(sub { candidates() == 2 }, 20, 0.1), 'ZooKeeper: two candidates');
is(zk_is_leader($A) . zk_is_leader($B), 'tf', 'A leads, B does not');
my $sysA = $A->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $la = $A->safe_psql('postgres', "SELECT cluster, port, this_server, token FROM zk_leader('cron')");
my $lb = $B->safe_psql('postgres', "SELECT cluster, port, this_server, token FROM zk_leader('cron')");
my ($lead_node) = sort { (split /__lock__/, $a)[1] cmp (split /__lock__/, $b)[1] } zk_children($zk, $EL);
my $token = zk_czxid($zk, "$EL/$lead_node");
is($la, "$sysA|" . $A->port . "|t|$token", "zk_leader on A: A, this server, its node's token ($token)");
is($lb, "$sysA|" . $A->port . "|f|$token", 'zk_leader on B: A, not this server, the same token');
is($A->safe_psql('postgres', "SELECT zk_is_leader('other')"), 't', "the second election ('other') too");
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_locks"), '0', 'candidacies are not in zk_locks');
is(zk_status_value($A, 'leaderships') . zk_status_value($B, 'leaderships'), '20',
	'zk_status: A began to lead two elections, B none');
is($A->safe_psql('postgres', "SELECT string_agg(name || ':' || is_leader || ':' || (token IS NOT NULL), ' ' ORDER BY name) FROM zk_elections"),
	'cron:true:true other:true:true', 'zk_elections on A: both, leading, with tokens');
is($B->safe_psql('postgres', "SELECT string_agg(name || ':' || is_leader || ':' || (token IS NOT NULL), ' ' ORDER BY name) FROM zk_elections"),
	'cron:false:false other:false:false', 'zk_elections on B: both, standing');

#
# 2. the leader's connection frozen; kazoo stands behind
#
my $k = kazoo_process($zk, $ZkLockTest::PYTHON, "$ZkLockTest::SRC/test/election_kazoo.py", $zk->{hosts}, $EL,
	'py-candidate');
is($k->read_line(30), 'ready', 'kazoo candidate connected');
is($k->cmd('run'), 'standing', 'kazoo stands');
ok(wait_until(sub { candidates() == 3 }, 10, 0.1), 'ZooKeeper: three candidates');

proxy_cmd($pA, 'freeze');
my $t = time();
my ($a_false, $b_true, $both) = (undef, undef, 0);
while (time() - $t < 20)
{
	my $a = zk_is_leader($A);
	my $b = zk_is_leader($B);
	$both++ if $a eq 't' && $b eq 't';
	$a_false //= time() - $t if $a ne 't';
	$b_true //= time() - $t if $b eq 't';
	last if defined $b_true;
	sleep 0.1;
}
ok(defined $a_false && $a_false < 5.5,
	sprintf('A says false before its 6 s session could expire (%.1f s)', $a_false // -1));
ok(defined $b_true, sprintf('B leads once A\'s session expired (%.1f s)', $b_true // -1));
is($both, 0, 'never both');
proxy_cmd($pA, 'thaw');
ok(wait_until(sub { candidates() == 3 }, 30, 0.2), 'after the thaw A stands again (three candidates)');
sleep 0.5;
is(zk_is_leader($A) . zk_is_leader($B), 'ft', 'B still leads');

#
# 3. B stopped: kazoo leads; kazoo resigns: A leads
#
$B->stop('immediate');
is($k->read_line(30), 'leading', 'kazoo leads once B is gone');
is(zk_is_leader($A), 'f', 'A does not');
is($A->safe_psql('postgres', "SELECT coalesce(cluster, 'none') || ' ' || data FROM zk_leader('cron')"),
	'none py-candidate', "zk_leader on A: kazoo's candidate, its identifier as data");
is($k->cmd('resign'), 'resigned', 'kazoo resigns');
ok(wait_until(sub { zk_is_leader($A) eq 't' }, 10, 0.1), 'A leads');
$k->quit;
$B->start;
ok(wait_until(sub { candidates() == 2 }, 20, 0.1), 'B, back, stands behind A');

#
# 4. the setting reloaded
#
my $before = candidates();
my ($rc, $out, $err);
$A->safe_psql('postgres', "ALTER SYSTEM SET zklock.elections = 'other'; SELECT pg_reload_conf()");
ok(wait_until(sub { zk_is_leader($A) eq 'f' && candidates() == $before - 1 }, 10, 0.1),
	"without 'cron' in the setting A withdraws (its node goes)");
ok(wait_until(sub { zk_is_leader($B) eq 't' }, 10, 0.1), 'and B, next in line, leads');
is($A->safe_psql('postgres', "SELECT zk_is_leader('other')"), 't', "and still leads 'other'");
$A->safe_psql('postgres', "ALTER SYSTEM SET zklock.elections = 'cron,other'; SELECT pg_reload_conf()");
ok(wait_until(sub { candidates() == $before }, 10, 0.1), 'with it again, A stands');
# the worker terminated: it restarts, lets go of its old candidacies (the
# old session is closed, so 'other' passes to B) and stands again
is($A->safe_psql('postgres', "SELECT zk_is_leader('other')"), 't', "A leads 'other'");
my $wpid = worker_pid($A);
$A->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
ok(wait_until(sub { $B->safe_psql('postgres', "SELECT zk_is_leader('other')") eq 't' }, 20, 0.1),
	"A's worker terminated: B leads 'other'");
ok(wait_until(sub { $A->safe_psql('postgres', 'SELECT count(*) FROM zk_elections') eq '2' }, 20, 0.1),
	'the new worker stands in both again');
ok(wait_until(sub { zk_status_value($A, 'entries_used') eq '2' }, 10, 0.1),
	'no entry of the old worker left (two in use, one per election)');
is(candidates(), $before, 'and in ZooKeeper one candidacy of A');
($rc, $out, $err) = $A->psql('postgres', "ALTER SYSTEM SET zklock.elections = 'a,,b'");
like($err, qr/invalid value for parameter "zklock.elections"/, 'an empty name in the list is refused');

#
# 5. a standby does not stand; promoted, it does
#
my $S = zk_standby_node('elS', $A);
$before = candidates();
sleep 1;
is(candidates(), $before, 'the standby does not stand');
is($S->safe_psql('postgres', "SELECT zk_is_leader('cron')"), 'f', 'zk_is_leader on the standby: false');
$A->stop('immediate');
$S->promote;
my $mine = "SELECT count(*) FROM zk_election_candidates('cron') WHERE cluster = '$sysA' AND port = "
  . $S->port;
ok(wait_until(sub { $S->safe_psql('postgres', $mine) eq '1' }, 30, 0.2), 'promoted, it stands');
is(zk_is_leader($B), 't', 'B still leads');
is(zk_is_leader($S), 'f', 'the promoted standby, behind B, does not');

#
# 6. bad input
#
foreach my $b ([ '22004', 'NULL' ], [ '22023', "''" ], [ '22023', "repeat('x', 256)" ])
{
	my $r = one_shot($S, "SELECT zk_is_leader($b->[1])", 30);
	is($r->{sqlstate}, $b->[0], "zk_is_leader($b->[1]): $b->[0]") or diag $r->{err};
}

$_->stop('fast', fail_ok => 1) foreach ($A, $B, $S);
proxy_stop($pA);
zk_stop($zk);
note sprintf('450_election: %.1fs', time() - $T0);
done_testing();
