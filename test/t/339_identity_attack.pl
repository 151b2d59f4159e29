
# 339_identity_attack.pl - attacks on the runs of a cluster (history.c):
# ways a copy, an outage or an operator made the settling pass release a
# live claim or leave a dead one for ever.
#
# 1. zk_queue_release_cluster('<sysid>-<run>') on a copy, naming the run of
#    the live original it is a copy of (the very name its WARNING gives):
#    the copy had marked that run "denied" in its lineage file and never
#    asked again whether it was alive, so the release took it for a dead
#    run and released the original's live claim.  A second consumer took
#    the item and both COMMITs consumed it.  Now a denied run's liveness is
#    surveyed like any other's, and the release of a live run fails with
#    55006 (issue 23) and leaves it alone.
# 2. A failover while ZooKeeper restarts: the primary's host dies with a
#    claim; its standby is promoted.  A restarted ZooKeeper gives every
#    session it restores (the dead primary's too) a fresh timeout, so the
#    dead run's `live` stays up to a session timeout after ZooKeeper comes
#    back.  The window after which a run still alive means "this server is
#    a copy of it" was counted from the new run's first registration,
#    before a second outage: the promoted standby declared itself a copy of
#    the primary it replaced, wrote that into zklock.runs for good, and the
#    dead primary's claim was never released.  Now the window counts from
#    the last (re)connection to ZooKeeper.
# 3. A server cut off from ZooKeeper for longer than its session timeout
#    while a backup of it starts: the copy takes the dead-looking run over,
#    releases its claim and, nothing being left, deletes the run's node.
#    The original reconnected, found its run node gone, registered it anew
#    and was never fenced: the claim the copy released and a consumer of
#    the copy took again was consumed by the original's COMMIT too (its
#    consume deletes the other consumer's claim).  Now a server that took
#    a run over keeps its node and heir for an hour, the original finds the
#    heir and is fenced, the fence survives a worker restart, and a COMMIT
#    holding claims of a fenced run fails (55000).  (A run node gone sooner
#    means ZooKeeper lost its data: the run registers again.)
#    A ROLLBACK on the original while it was cut off deleted, once it was
#    back, the claim a consumer of the copy had made on the same item
#    meanwhile (the item was free again while that consumer held it); now
#    the end of claims waits until the run is registered again.
#    And (a fault run, issue 22): a copy that takes a run over cannot tell
#    "never committed" from "committed after my WAL ends" (the original
#    committed a consume, then was cut off before deleting its claims; the
#    copy released them and a second consumer took the items).  Now a copy
#    settles only the claims its WAL shows committed and leaves the others;
#    the fenced original ends its own claims itself, each read first and
#    deleted only if still its own.  A promoted standby still releases
#    the dead primary's uncommitted claims (part 2): the promotion
#    abandoned what the primary did after the switch.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $Q = '/zklock/queues';

sub taken { my @l = zk_children($zk, "$Q/$_[0]/taken"); return scalar @l; }

# the run a claim names
sub claim_run
{
	my ($q) = @_;
	my @t = zk_children($zk, "$Q/$q/taken");
	return undef unless @t == 1;
	my $d = zk_get($zk, "$Q/$q/taken/$t[0]") // '';
	return $d =~ /"run":"([0-9a-f]{16})"/ ? $1 : undef;
}

# ---- 1. a release, on the copy, of the live original's run ----
my $A = zk_streaming_node('atkA', $zk, session_timeout => '4s', connect_timeout => '3s');
my $sysid = $A->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
$A->safe_psql('postgres',
	"SELECT zk_enqueue('rq', 'r' || i) FROM generate_series(1, 3) i");
my $h = new_session($A, name => 'holder');
$h->query_safe('BEGIN');
is($h->query_safe("SELECT body FROM zk_dequeue('rq', '5s')"), 'r1', 'A holds r1');
my $arun = claim_run('rq');
ok(defined $arun, "the claim names A's run");

$A->backup('bkB');
my $B = PostgreSQL::Test::Cluster->new('atkB');
$B->init_from_backup($A, 'bkB');
$B->start;
ZkLockTest::wait_connected($B, 'the copy B did not connect');
ok(wait_log($B, qr/run $sysid-$arun of this cluster is alive on another server; this server is a copy of it/),
	"B says it is a copy of A's live run");
my $rel = one_shot($B, "SELECT zk_queue_release_cluster('$sysid-$arun')");
is($rel->{sqlstate}, '55006', "B's release of A's live run is refused (55006)");
like($rel->{err}, qr/Its run $sysid-$arun is registered/, '... naming the run');
is(taken('rq'), 1, "A's claim is still there");
is(queue_drain($B, 'rq'), 'r2,r3', 'B cannot take the item A holds');
$h->query_safe('COMMIT');
$h->quit;
ok(wait_until(sub { taken('rq') == 0 }, 20), "A's COMMIT consumed r1");
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'r4')");
is(queue_drain($B, 'rq'), 'r4', 'r1 was consumed once, by A');
$B->stop('fast');
$A->stop('fast');

# ---- 2. a failover across a restart of ZooKeeper ----
my $D = zk_streaming_node('atkD', $zk, session_timeout => '10s', connect_timeout => '3s');
my $dsys = $D->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
$D->safe_psql('postgres',
	"SELECT zk_enqueue('oq', 'o' || i) FROM generate_series(1, 3) i");
my $S = zk_standby_node('atkS', $D);
my $d = new_session($D, name => 'doomed');
$d->query_safe('BEGIN');
is($d->query_safe("SELECT body FROM zk_dequeue('oq', '5s')"), 'o1', 'D claims o1');
my $r1 = claim_run('oq');
ok(defined $r1, "the claim names D's run");
$D->wait_for_catchup($S);
# D's host dies; ZooKeeper stops with D's session in it; S is promoted
$D->stop('immediate');
$d->quit;
zk_stop($zk);
$S->promote;
zk_restart($zk);
# S registers its run while D's restored session lives on
my $r2;
ok(wait_until(sub {
	my @live = grep { zk_exists($zk, "/zklock/runs/$_/live") }
	  grep { /^$dsys-[0-9a-f]{16}$/ && !/-$r1$/ } zk_children($zk, '/zklock/runs');
	$r2 = $live[0] if @live == 1;
	return defined $r2;
}, 30, 0.1), 'the promoted S registered its run');
my $r1_live = zk_exists($zk, "/zklock/runs/$dsys-$r1/live");
zk_stop($zk);
SKIP:
{
	skip "D's session expired before ZooKeeper stopped again", 2 unless $r1_live;
	# down for longer than the window (1.5 session timeouts + 5 s = 20 s)
	sleep 24;
	zk_restart($zk);
	ZkLockTest::wait_connected($S, 'S did not reconnect');
	ok(wait_until(sub { taken('oq') == 0 }, 60),
		"S took the dead D's run over and released its claim (a promotion abandons D's timeline)");
	unlike(slurp_file($S->logfile), qr/this server is a copy of it/,
		'S never called itself a copy of the primary it replaced');
}
is(queue_drain($S, 'oq'), 'o1,o2,o3', 'S takes every item of oq, each once');

$S->stop('fast');

# ---- 3. a run taken over while its server was cut off ----
my $p = proxy_start($zk);
my $P = zk_streaming_node('atkP', $p->{hosts}, session_timeout => '4s', connect_timeout => '3s');
my $psys = $P->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
$P->safe_psql('postgres',
	"SELECT zk_enqueue('fq', 'f' || i) FROM generate_series(1, 3) i");
my $hp = new_session($P, name => 'holderP');
$hp->query_safe('BEGIN');
is($hp->query_safe("SELECT body FROM zk_dequeue('fq', '5s')"), 'f1', 'P holds f1');
my $prun = claim_run('fq');
my $hp2 = new_session($P, name => 'holderP2');
$hp2->query_safe('BEGIN');
is($hp2->query_safe("SELECT body FROM zk_dequeue('fq', '5s')"), 'f2', 'P holds f2');
$P->backup('bkC');
my $C = PostgreSQL::Test::Cluster->new('atkC');
$C->init_from_backup($P, 'bkC');
$C->append_conf('postgresql.conf', "zklock.hosts = '$zk->{hosts}'\n");
# P is cut off from ZooKeeper; its session expires; C starts
proxy_cmd($p, 'refuse 3600');
proxy_cmd($p, 'cut-all');
$C->start;
ZkLockTest::wait_connected($C, 'C did not connect');
ok(wait_log($C, qr/took over run $psys-$prun of this cluster/, 90),
	"C took P's dead run over and settled it");
ok(zk_exists($zk, "/zklock/runs/$psys-$prun/heir"),
	"C keeps P's run and its heir (forgotten only an hour later)");
# C is a copy: P's transactions may commit after C's WAL ends (P is only
# cut off), so C leaves P's claims (its WAL does not show them committed)
sleep 3;
is(taken('fq'), 2, "C leaves P's claims (its WAL does not show them committed)");
my $hc = new_session($C, name => 'holderC');
$hc->query_safe('BEGIN');
is($hc->query_safe("SELECT string_agg(body, ',') FROM zk_dequeue('fq', '5s', 2)"), 'f3',
	'C claims only f3');
# P's second holder rolls back while P is cut off: its release waits
$hp2->query_safe('ROLLBACK');
$hp2->quit;
# P comes back
proxy_cmd($p, 'refuse 0');
ok(wait_log($P, qr/another server took over this server's run $psys-$prun/, 40),
	'P learns that its run was taken over');
# P's WAL is its run's history: P ends its own rolled-back claim itself
ok(wait_until(sub { taken('fq') == 2 }, 30), "P released f2 itself (its ROLLBACK), C's f3 stays");
my $r = $hp->query('COMMIT', 30);
is($r->{sqlstate}, '55000', "P's COMMIT of a claim of its fenced run fails")
  or diag explain $r;
$hp->quit;
ok(wait_until(sub { taken('fq') == 1 }, 30), "P released f1 itself (its failed COMMIT)");
$hc->query_safe('COMMIT');
$hc->quit;
$C->safe_psql('postgres', "SELECT zk_enqueue('fq', 'f4')");
is(queue_drain($C, 'fq'), 'f1,f2,f4', 'f1 and f2 came back once, f3 was consumed once, by C');
$r = $P->psql('postgres', "SELECT zk_try_dequeue('fq')");
isnt($r, 0, "P refuses new claims until it restarts");
$P->restart;
ZkLockTest::wait_connected($P, 'P did not reconnect');
$P->safe_psql('postgres', "SELECT zk_enqueue('fq', 'f5')");
is($C->safe_psql('postgres', "SELECT body FROM zk_try_dequeue('fq')"), 'f5',
	'after a restart P works again');

# ---- 4. a copy never releases what its original committed ----
# P commits a dequeue, but its consume never reaches ZooKeeper (the proxy
# drops it) and P is cut off; a copy of P from before the commit takes the
# run over.  Its WAL has the claim's record but not the commit: it must
# leave the claim (the fault run saw a clone release it, and a second
# consumer took the item).  P, back and fenced, consumes it itself.
$C->stop('fast');
$P->safe_psql('postgres', "SELECT zk_enqueue('cq4', 'g1')");
my $h4 = new_session($P, name => 'holder4');
$h4->query_safe('BEGIN');
is($h4->query_safe("SELECT body FROM zk_dequeue('cq4', '5s')"), 'g1', 'P holds g1');
my $p4run = claim_run('cq4');
$P->backup('bkC4');
proxy_rule($p, 'drop-requests multi');
$h4->query_safe('COMMIT');
$h4->quit;
is(taken('cq4'), 1, "P committed, its consume has not reached ZooKeeper");
proxy_cmd($p, 'refuse 3600');
proxy_cmd($p, 'cut-all');
my $C4 = PostgreSQL::Test::Cluster->new('atkC4');
$C4->init_from_backup($P, 'bkC4');
$C4->append_conf('postgresql.conf', "zklock.hosts = '$zk->{hosts}'\n");
$C4->start;
ZkLockTest::wait_connected($C4, 'C4 did not connect');
ok(wait_log($C4, qr/took over run $psys-$p4run of this cluster/, 90),
	"the copy C4 took the cut-off P's run over");
sleep 3;
is(taken('cq4'), 1, "C4 leaves the claim P committed (its WAL does not show the commit)");
is(queue_drain($C4, 'cq4'), '', 'nobody else gets g1');
proxy_cmd($p, 'reset');
proxy_cmd($p, 'refuse 0');
ok(wait_until(sub { taken('cq4') == 0 && scalar(zk_children($zk, "$Q/cq4/entries")) == 0 }, 60),
	'P, back (and fenced), consumes its committed claim itself');
is(queue_drain($C4, 'cq4'), '', 'g1 was consumed once, by P');

$P->stop('fast');
$C4->stop('fast');
zk_stop($zk);
done_testing();
