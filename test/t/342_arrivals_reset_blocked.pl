
# 342_arrivals_reset_blocked.pl - zk_arrivals_reset facing an arrival with a
# node under it that is not its own (another client's, or a late create of
# an ended session) pauses between rounds and gives up with 55006 (issues
# 35 and 36).
#
# A reset deletes an arrival together with a node of its own under it (a
# multi, 341_late_arrivals_reset.pl); an arrival with another node under it
# is not empty and the reset runs again.  Before this test it ran again at
# once, every turn of the worker, without end: the backend's call never
# returned and the worker wrote to ZooKeeper (a create, a failing multi, a
# delete per round) as fast as ZooKeeper answered.  Now:
#   1. another client's node under p1 stays: the call fails with 55006
#      after twice the session timeout, naming p1, with a hint; p2 was
#      deleted, p1 and the node stay; ZooKeeper received a few hundred
#      requests at most meanwhile (counted by ZooKeeper itself, mntr's
#      zk_packets_received), not tens of thousands;
#   2. the node is deleted while the reset pauses: the reset then deletes
#      p1 and answers 2, the arrivals of every round (p2 went in the first).
#   3. a reset cancelled while it pauses returns at once, and the worker
#      lets the entry go.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
# session timeout 4 s: a blocked reset gives up after 8 s
my $A = zk_node('rstblk', $zk, session_timeout => '4s', connect_timeout => '3s');
sub sql { return $A->safe_psql('postgres', $_[0]); }
my $ARR = '/zklock/arrivals';

sub packets
{
	my $m = zk_fourlw($zk, 'mntr');
	my ($n) = $m =~ /^zk_packets_received\s+(\d+)/m;
	die "mntr has no zk_packets_received:\n$m" unless defined $n;
	return $n;
}

# ---- 1. another client's node stays: 55006 after 8 s ----
sql("SELECT zk_arrive('blk', 'p1')");
sql("SELECT zk_arrive('blk', 'p2')");
my ($rc, $out, $err) = zkq($zk, 'create', "$ARR/blk/p1/foreign", 'x');
is($rc, 0, "another client put a node under arrival p1") or diag $err;
my $wpid = worker_pid($A);
my $p0 = packets();
my $t0 = time();
my $s = new_session($A, name => 'reset1');
my $r = $s->query("\\set VERBOSITY verbose\nSELECT zk_arrivals_reset('blk')", 60);
my $took = time() - $t0;
my $sent = packets() - $p0;
ok($r->{done}, 'the reset returned') or diag explain $r;
is($r->{sqlstate}, '55006', 'with 55006') or diag $r->{err};
like($r->{err}, qr/could not reset the arrivals/, '... could not reset the arrivals');
like($r->{err}, qr/DETAIL:\s+Arrival "p1" kept a node under it that the reset did not make for \d+ s; the other arrivals were deleted\./, '... the detail names p1');
like($r->{err}, qr/HINT:\s+Delete the node another client put there/, '... the hint says what to do');
cmp_ok($took, '>=', 6, "after the retries' bound (8 s), not at once: ${took}s");
cmp_ok($took, '<', 40, 'and not much later');
cmp_ok($sent, '<', 1000, "ZooKeeper received $sent requests meanwhile, a few per round, not a flood");
# (before the fix the call never returned: 311,663 requests in 60 s)
$r->{done} ? $s->quit : $s->kill_client;
ok(!zk_exists($zk, "$ARR/blk/p2"), 'p2 was deleted');
ok(zk_exists($zk, "$ARR/blk/p1") && zk_exists($zk, "$ARR/blk/p1/foreign"),
	"p1 and the other client's node stay");
is(scalar(grep { /^reset-/ } zk_children($zk, "$ARR/blk/p1")), 0, "no node of the reset's is left under p1");
is(worker_pid($A), $wpid, 'the worker is the same');

# ---- 2. the node goes while the reset pauses: it finishes, counting all ----
sql("SELECT zk_arrive('blk', 'p3')");
$s = new_session($A, name => 'reset2');
$s->send("SELECT zk_arrivals_reset('blk')");
ok(wait_for_backend_active($A, $s->pid, '%zk_arrivals_reset%', 30), 'a second reset runs');
sleep 2;
ok(zk_exists($zk, "$ARR/blk/p1"), 'p1 is still there after 2 s of rounds');
($rc, $out, $err) = zkq($zk, 'delete', "$ARR/blk/p1/foreign");
is($rc, 0, "the other client's node is deleted") or diag $err;
$r = $s->wait(30);
is($r->{sqlstate}, '00000', 'the reset succeeds') or diag $r->{err};
is($r->{out}, '2', 'and counts p3 (its first round) and p1 (its last)');
$s->quit;
ok(!zk_exists($zk, "$ARR/blk/p1") && !zk_exists($zk, "$ARR/blk/p3"), 'both are gone');

# ---- 3. cancelled while it pauses ----
sql("SELECT zk_arrive('blk2', 'q1')");
($rc, $out, $err) = zkq($zk, 'create', "$ARR/blk2/q1/foreign", 'x');
is($rc, 0, "another client's node under q1") or diag $err;
$s = new_session($A, name => 'reset3');
$s->send("SELECT zk_arrivals_reset('blk2')");
ok(wait_for_backend_active($A, $s->pid, '%zk_arrivals_reset%', 30), 'a third reset runs');
sleep 1;
$A->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $s->pid . ')');
$r = $s->wait(10);
is($r->{sqlstate}, '57014', 'cancelled (57014)') or diag $r->{err};
$s->quit;
# the worker lets go of it: ZooKeeper hears nothing more of it
sleep 1;
$p0 = packets();
sleep 3;
cmp_ok(packets() - $p0, '<', 40, 'the worker stopped its rounds (only pings meanwhile)');
is(scalar(grep { /^reset-/ } zk_children($zk, "$ARR/blk2/q1")), 0, "no node of the reset's is left");
is(sql("SELECT count(*) FROM zk_status() WHERE true"), '1', 'zk_status answers');
is(worker_pid($A), $wpid, 'the worker is the same');

$A->stop('fast');
zk_stop($zk);
done_testing();
