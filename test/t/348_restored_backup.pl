
# 348_restored_backup.pl - a restored backup's stranded claims and
# transaction nodes are settled: from its WAL where it proves the outcome,
# else by the operator's zk_queue_release_cluster('<sysid>-<run>') while
# the restored copy (same system identifier) runs (issue 36, item 3).
#
# A holds a claim in an open transaction (X: BEGIN; zk_dequeue) and has
# committed a transaction whose publication ZooKeeper refuses (its
# transaction node stays: another client gave the gate it opens a child
# between the check before the commit record and the publication after
# it) when a base backup is taken; after the backup it commits another
# such transaction (its row and its item are not in the backup).  A dies
# (immediate).  B, started from the backup, shares A's system identifier.
# B waits (its session timeout is long) before it takes A's run over by
# itself, and leaves A's nodes alone meanwhile: r1 is not handed out.
#   - zk_queue_release_cluster('<sysid>') is refused (B runs) but names
#     A's run; B's own run is refused with 55006; a run that never existed
#     releases nothing; from another cluster D, A's dead run is refused
#     while B runs (B may settle it from its WAL; the hint sends the
#     operator there), B's run and the whole identifier as alive (55006);
#   - zk_queue_release_cluster('<sysid>-<A's run>') releases A's run at
#     once (until issue 36 it returned 0 here): the transaction B's WAL
#     shows committed is published (its item, its gate opened), X's claim
#     is released (r1 handed out once more), the transaction committed
#     after the backup point, which B's database does not have either, is
#     discarded.
# At the end every item is handed out exactly once and ZooKeeper holds no
# claim and no transaction node.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
# a session timeout longer than commit_unpublished's hold, a commit
# timeout longer than both (the COMMIT waits for its transaction node)
my $A = zk_streaming_node('rbA', $p->{hosts},
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.commit_timeout = '20s'\n");
my $Q = '/zklock/queues';
my $TXNS = '/zklock/txns';

sub entries { return zk_count($zk, "$Q/$_[0]/entries"); }
sub taken   { return zk_count($zk, "$Q/$_[0]/taken"); }
sub txns    { return scalar zk_txns_pending($zk, $TXNS); }

# A committed transaction whose publication ZooKeeper refuses: it
# enqueues $item and opens gate $gate.  Before its commit record A checks
# that the gate has no child and writes the transaction node; the proxy
# holds the answer to that create while another client gives the gate a
# child, so the publishing multi after the commit record is refused
# (NOTEMPTY): the COMMIT succeeds with a WARNING that says why, the
# transaction node stays, A tries it again every few seconds.  Nothing A
# sends is dropped: a dropped multi (as in 413_publication_refused.pl)
# also dropped the retries of the transaction refused before, and each
# answer after a dropped request makes the C client drop the connection,
# so A's session went on failing while the drop lasted and the COMMIT
# failed (08006) whenever such a retry came before its transaction node
# was written (seen on ZooKeeper 3.9.6; a matter of timing, not of the
# release).  The hold is far shorter than A's session timeout (10 s: the
# C client gives a silent connection up after two thirds of it).
sub commit_unpublished
{
	my ($item, $gate, $nblocked) = @_;
	$A->safe_psql('postgres', "SELECT zk_gate_close('$gate')");
	my $s = new_session($A, name => "prod_$item");
	$s->query_safe('BEGIN');
	$s->query_safe("INSERT INTO produced VALUES ('$item')");
	$s->query_safe("SELECT zk_enqueue('rb', '$item')");
	$s->query_safe("SELECT zk_gate_open('$gate')");
	my $hold = proxy_rule($p, 'drop-replies create');
	$s->send('COMMIT');
	ok(proxy_wait_fired($p, $hold, 10), "$item: its transaction node is written, the answer held");
	zkq($zk, 'create', "/zklock/gates/$gate/foreign", 'other client');
	proxy_cmd($p, "clear $hold");
	proxy_cmd($p, 'release');
	my $r = $s->wait(30);
	is($r->{sqlstate}, '00000', "$item: COMMIT succeeds") or diag explain $r;
	like($r->{err}, qr/WARNING:.*zookeeper refuses to publish the zklock work of this committed transaction/,
		"$item: its COMMIT warns that ZooKeeper refuses its publication");
	like($r->{err}, qr{DETAIL:.*cannot delete /zklock/gates/$gate: another client created children under it}s,
		"$item: ... because of the gate's foreign child");
	is(zk_status_value($A, 'publications_blocked'), $nblocked, "$item: A keeps it, blocked");
	$s->quit;
}

$A->safe_psql('postgres', 'CREATE TABLE produced (item text)');
$A->safe_psql('postgres', "SELECT zk_enqueue('rb', 'r' || i) FROM generate_series(1, 3) i");

# X: a claim in an open transaction
my $x = new_session($A, name => 'holder');
$x->query_safe('BEGIN');
is($x->query_safe("SELECT body FROM zk_dequeue('rb', '5s')"), 'r1', 'A claims r1 in an open transaction');
is(taken('rb'), 1, 'the claim is in ZooKeeper');

commit_unpublished('p_before', 'g1', '1');
is(txns(), 1, 'the committed transaction node waits in ZooKeeper');
$A->backup('bk');
commit_unpublished('p_after', 'g2', '2');
is(txns(), 2, 'the second one too');

my $sysid = $A->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my @aruns = grep { /^$sysid-[0-9a-f]{16}$/ } zk_children($zk, '/zklock/runs');
is(scalar @aruns, 1, "A's run is registered") or diag explain \@aruns;
my $arun = $aruns[0];

$A->stop('immediate');
$x->quit;
# what blocked the earlier publication is gone
zkq($zk, 'delete', '/zklock/gates/g1/foreign');

my $B = PostgreSQL::Test::Cluster->new('rbB');
$B->init_from_backup($A, 'bk');
# a long session timeout: B gives a run without "live" 50 s to come back
# before it takes it over by itself; the operator does not wait for that
$B->append_conf('postgresql.conf', "zklock.session_timeout = '20s'\n");
$B->start;
ZkLockTest::wait_connected($B, 'the restored B did not connect');
is($B->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'), $sysid,
	'B is a copy of A: one system identifier');
ok(wait_until(sub { !zk_exists($zk, "/zklock/runs/$arun/live") }, 30),
	"A's session is gone from ZooKeeper");
sleep 3;
is(taken('rb') . '/' . txns(), '1/2', "B leaves A's claim and transaction nodes alone");
is(queue_drain($B, 'rb'), 'r2,r3', 'B takes what is free, each once; r1 is stuck');
is($B->safe_psql('postgres', "SELECT string_agg(item, ',' ORDER BY item) FROM produced"),
	'p_before', "B's database has the earlier producer's row only");

# wrong calls: B's own run is refused, the whole cluster is refused and
# names the run to release
my ($brun) = grep { /^$sysid-[0-9a-f]{16}$/ && $_ ne $arun } zk_children($zk, '/zklock/runs');
my ($ret, $out, $err) = $B->psql('postgres', "SELECT zk_queue_release_cluster('$brun')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:\s+55006: cannot release run "\Q$brun\E": it is this server's own run/,
	"B's own run is refused (55006)");
like($err, qr/HINT:/, '... with a hint');
($ret, $out, $err) = $B->psql('postgres', "SELECT zk_queue_release_cluster('$sysid')");
like($err, qr/ERROR:\s+cannot release this cluster's own queue claims/, 'the whole cluster is refused');
like($err, qr/DETAIL:.*\Q$arun\E/s, '... naming the dead run to release');
is(taken('rb') . '/' . txns(), '1/2', 'nothing released by refused calls');
is($B->safe_psql('postgres', "SELECT zk_queue_release_cluster('$sysid-00000000deadbeef')"), '0',
	'a run that never existed releases nothing');

# another cluster D (its own system identifier) may not release a run of
# A's identifier while B runs: B may be settling it from its WAL, which D
# cannot read; the error sends the operator to B.  B's live run and the
# whole identifier are refused as alive.
my $D = zk_node('rbD', $zk, session_timeout => '10s', connect_timeout => '3s');
($ret, $out, $err) = $D->psql('postgres', "SELECT zk_queue_release_cluster('$arun')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:\s+55006: cannot release run "\Q$arun\E" from this cluster: run \Q$brun\E of that system identifier is alive/,
	"another cluster: A's dead run is refused while B runs (55006), naming B's run");
like($err, qr/HINT:\s+Run SELECT zk_queue_release_cluster\('\Q$arun\E'\) on that server/, '... the hint sends the operator to B');
($ret, $out, $err) = $D->psql('postgres', "SELECT zk_queue_release_cluster('$brun')");
like($err, qr/ERROR:\s+cluster "\Q$brun\E" is alive/, "another cluster: B's live run is refused");
($ret, $out, $err) = $D->psql('postgres', "SELECT zk_queue_release_cluster('$sysid')");
like($err, qr/ERROR:\s+cluster "\Q$sysid\E" is alive/, 'another cluster: the whole identifier is refused while B runs');
is(taken('rb') . '/' . txns(), '1/2', "nothing of A's released by them");
$D->stop('fast');

# the operator releases A's run (until issue 36: 0, and r1 stuck for good)
is($B->safe_psql('postgres', "SELECT zk_queue_release_cluster('$arun')"), '3',
	"the operator releases the dead A's run: a claim and two transaction nodes");
ok(wait_log($B, qr/took over run \Q$arun\E of this cluster for zk_queue_release_cluster/, 5),
	'B took the run over for the release (a server of it that comes back stops)');
is(taken('rb') . '/' . txns(), '0/0', 'no claim, no transaction node left');
is(queue_drain($B, 'rb'), 'p_before,r1',
	"r1 is handed out again, once; the transaction B's WAL shows committed was published, the other discarded");
ok(!zk_exists($zk, '/zklock/gates/g1') && zk_exists($zk, '/zklock/gates/g2'),
	'gate g1 opened with its transaction, g2 (discarded) stays closed');
is($B->safe_psql('postgres', "SELECT zk_queue_release_cluster('$arun')"), '0',
	'a second release finds nothing');

# a restart of B changes nothing
$B->restart;
ZkLockTest::wait_connected($B, 'B did not reconnect');
sleep 3;
is(queue_drain($B, 'rb'), '', 'after a restart of B nothing more is handed out');
is(entries('rb') . '/' . taken('rb') . '/' . txns(), '0/0/0', 'ZooKeeper holds nothing of rb');

$B->stop('fast');
proxy_stop($p);
zk_stop($zk);
done_testing();
