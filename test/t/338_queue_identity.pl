
# 338_queue_identity.pl - copies of a cluster (one system identifier) never
# settle each other's queue claims and transactions (issue 22, items 2, 3).
#
# 1. A copy beside its running original: a base backup of A, started as B
#    against the same ZooKeeper while a transaction of A holds a claim.
#    Until issue 22 B's settling pass found the claim under its own system
#    identifier, judged the transaction aborted from its own commit log
#    and released it: the item went to a second consumer while A's
#    transaction still committed it.  Now B finds A's run alive after its
#    own start, says it is a copy, and leaves A's nodes alone.  Both
#    clusters then publish in transactions whose ids collide (the copy
#    starts from the original's counter): until issue 22 both wrote
#    txns/<sysid>-<xid> and a committed enqueue was silently lost.  Every
#    item of both arrives exactly once.
# 2. A backup restored after its original died: A claims an item after the
#    backup point and crashes.  C, started from the backup, takes A's dead
#    run over (its lineage file names it) and finds that the claim's
#    record is past its own WAL.  Until issue 22 the claim stayed, and was
#    consumed once C's own transaction ids reached the claim's.  A copy's
#    WAL may end before its original's commit, so C leaves the claim (a
#    fault run showed a clone releasing claims its original had committed);
#    the operator releases A's run with zk_queue_release_cluster and C
#    takes the item once; a restart of C after its ids passed A's changes
#    nothing.
# 3. The original comes back after C took its run over: its worker leaves
#    that run alone and the queues work.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $A = zk_streaming_node('idA', $zk, session_timeout => '4s', connect_timeout => '3s');
my $Q = '/zklock/queues';

sub entries { my @l = zk_children($zk, "$Q/$_[0]/entries"); return scalar @l; }
sub taken   { my @l = zk_children($zk, "$Q/$_[0]/taken"); return scalar @l; }

# ---- 1. a copy beside its running original ----
$A->safe_psql('postgres',
	"SELECT zk_enqueue('cq', 'c' || i) FROM generate_series(1, 4) i");
my $s1 = new_session($A, name => 'holder');
$s1->query_safe('BEGIN');
is($s1->query_safe("SELECT body FROM zk_dequeue('cq', '5s')"), 'c1', 'A holds c1');
is(taken('cq'), 1, 'its claim is in ZooKeeper');

$A->backup('bkB');
my $B = PostgreSQL::Test::Cluster->new('idB');
$B->init_from_backup($A, 'bkB');
$B->start;
ZkLockTest::wait_connected($B, 'the copy B did not connect');
is($B->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	$A->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	'B is a copy: one system identifier');
ok(wait_log($B, qr/is alive on another server; this server is a copy of it/),
	"B says it is a copy of A's live run");
is(taken('cq'), 1, "B left A's claim alone");

# colliding transaction ids: both publish 15 items, one per transaction,
# committing at the same moment with the same transaction id
my $pa = new_session($A, name => 'prodA');
my $pb = new_session($B, name => 'prodB');
{
	my $xa = $pa->query_safe('SELECT txid_current()');
	my $xb = $pb->query_safe('SELECT txid_current()');
	while ($xa < $xb) { $xa = $pa->query_safe('SELECT txid_current()'); }
	while ($xb < $xa) { $xb = $pb->query_safe('SELECT txid_current()'); }
	is($xa, $xb, 'A and B now hand out the same transaction ids');
}
for my $i (1 .. 15)
{
	$pa->query_safe("BEGIN; SELECT zk_enqueue('dup', 'A$i')");
	$pb->query_safe("BEGIN; SELECT zk_enqueue('dup', 'B$i')");
	$pa->send('COMMIT');
	$pb->send('COMMIT');
	my $ra = $pa->wait(30);
	my $rb = $pb->wait(30);
	die "a COMMIT did not finish" unless $ra->{done} && $rb->{done};
}
$pa->quit;
$pb->quit;
$s1->query_safe('COMMIT');
$s1->quit;
ok(wait_until(sub { entries('cq') == 3 && taken('cq') == 0 }, 20),
	"A's commit consumed c1");
is(queue_drain($B, 'cq'), 'c2,c3,c4', 'B takes the rest of cq, each once');
is(queue_drain($A, 'dup'), join(',', sort(map { ("A$_", "B$_") } 1 .. 15)),
	'every item both published arrived once (30)');
my @txns = zk_children($zk, '/zklock/txns');
is(scalar @txns, 0, 'no transaction node is left');
$B->stop('fast');

# ---- 2. a backup restored after its original died ----
$A->safe_psql('postgres',
	"SELECT zk_enqueue('dr', 'd' || i) FROM generate_series(1, 3) i");
$A->backup('bkC');
$A->safe_psql('postgres', 'CREATE TABLE filler (x int)');
$A->safe_psql('postgres', "INSERT INTO filler SELECT generate_series(1, 1000)")
  for 1 .. 5;
my $s2 = new_session($A, name => 'doomed');
$s2->query_safe('BEGIN');
is($s2->query_safe("SELECT body FROM zk_dequeue('dr', '5s')"), 'd1',
	'A claims d1 after the backup point');
$A->stop('immediate');
$s2->quit;
is(taken('dr'), 1, "the crashed A's claim is left in ZooKeeper");

my $C = PostgreSQL::Test::Cluster->new('idC');
$C->init_from_backup($A, 'bkC');
$C->start;
ZkLockTest::wait_connected($C, 'the restored C did not connect');
ok(wait_log($C, qr/took over run \d+-[0-9a-f]{16} of this cluster/, 90),
	"C took the dead A's run over");
my ($arun) = slurp_file($C->logfile) =~ /took over run (\d+-[0-9a-f]{16}) of this cluster/;
# C cannot prove the run was its own (its WAL may end before a commit of
# A's): it leaves the claim its WAL does not show committed
sleep 3;
is(taken('dr'), 1, "C leaves the claim of a transaction its history does not show committed");
is(queue_drain($C, 'dr'), 'd2,d3', 'C takes the other items, each once');
# the operator, knowing A gone, releases its run
is($C->safe_psql('postgres', "SELECT zk_queue_release_cluster('$arun')"), '1',
	"the operator releases the dead A's run");
is(queue_drain($C, 'dr'), 'd1', 'and C takes d1 once');

# C's own transaction ids pass A's; a restart settles nothing more
$C->safe_psql('postgres', "CREATE TABLE t (x int)");
$C->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 30;
$C->safe_psql('postgres', "SELECT zk_enqueue('dr', 'after')");
$C->restart;
ZkLockTest::wait_connected($C, 'C did not reconnect');
sleep 2;
is(queue_drain($C, 'dr'), 'after', 'after a restart of C: only its new item');

# ---- 3. the original comes back ----
$A->start;
ZkLockTest::wait_connected($A, 'A did not reconnect');
$A->safe_psql('postgres', "SELECT zk_enqueue('back', 'x')");
is($C->safe_psql('postgres', "SELECT body FROM zk_try_dequeue('back')"), 'x',
	'queues work across A and C');
my @runs = zk_children($zk, '/zklock/runs');
ok(scalar(grep { /^\d+-[0-9a-f]{16}$/ } @runs) >= 2, 'the runs are registered in ZooKeeper')
  or diag explain \@runs;

$A->stop('fast');
$C->stop('fast');
zk_stop($zk);
done_testing();
