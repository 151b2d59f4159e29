
# 352_queue_attempts.pl - zk_message.attempts, the delivery count, across
# the ways a hand-out can end without a consume, two clusters and kazoo.
#
# One item is handed out again and again: rolled back on A, its backend
# terminated on B, A's worker killed (a crash restart of A), PostgreSQL A
# stopped immediately and started again, then held and let go by a kazoo
# LockingQueue consumer, and at last consumed on B.  Each zklock hand-out
# shows one more attempt, whichever cluster made it; kazoo's is not
# counted (kazoo does not know the count); a peek shows the hand-outs so
# far.  The count lives in the item node's cversion (each claim creates
# and deletes a child in its multi), so ZooKeeper must show the item with
# no child and kazoo must still consume items zklock handed out.  An item
# whose child cannot be made (a node another client put there, an ACL that
# lets zklock only read it) is handed out uncounted, attempts NULL, and the
# queue goes on.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
# PostgreSQL::Test::Cluster turns restart_after_crash off: A needs it on
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('attempts_a', $zk, %opts, conf => "restart_after_crash = on\n");
my $B = zk_node('attempts_b', $zk, %opts);
my $Q = '/zklock/queues/poison';

# no claim left on the queue (a hand-out has ended)
sub released
{
	my ($what) = @_;
	ok(scalar(zk_wait_count($zk, "$Q/taken", 0, 60)), "$what: the claim is gone");
	return;
}

# the attempts of the first item a new transaction of $node dequeues, the
# session left in that transaction
sub hand_out
{
	my ($s) = @_;
	$s->query_safe('BEGIN');
	return $s->query_safe("SELECT attempts || ':' || body FROM zk_dequeue('poison', '30s')");
}

$A->safe_psql('postgres', "SELECT zk_enqueue('poison', 'p1')");
ok(scalar(zk_wait_count($zk, "$Q/entries", 1, 30)), 'the item is published');
my ($item) = map { $_->{name} } zk_nodes_of($zk, "$Q/entries");
is($A->safe_psql('postgres', "SELECT attempts FROM zk_queue_peek('poison')"), '0',
	'a peek before any hand-out shows 0');

# 1. rolled back on A
my $a1 = new_session($A, name => 'a1');
is(hand_out($a1), '1:p1', 'first hand-out (A): attempts 1');
$a1->query_safe('ROLLBACK');
released('rollback');

# 2. on B, its backend terminated
my $b1 = new_session($B, name => 'b1');
is(hand_out($b1), '2:p1', 'second hand-out (B): attempts 2');
my $bpid = $b1->query_safe('SELECT pg_backend_pid()');
$B->safe_psql('postgres', "SELECT pg_terminate_backend($bpid)");
released('terminated backend');

# 3. on A, the worker killed: a crash restart of A settles the claim
my $a2 = new_session($A, name => 'a2');
is(hand_out($a2), '3:p1', 'third hand-out (A again): attempts 3');
my $wpid = worker_pid($A);
kill 'KILL', $wpid;
released('worker killed');
ok(defined wait_for_worker($A, $wpid, 60), 'A has a new worker');
ZkLockTest::wait_connected($A, 'A did not connect again');

# 4. on A, PostgreSQL stopped immediately while the item is handed out
my $a3 = new_session($A, name => 'a3');
is(hand_out($a3), '4:p1', 'fourth hand-out (A, after its crash restart): attempts 4');
$A->stop('immediate');
is(zk_count($zk, "$Q/taken"), 1, 'the claim outlives the crash');
$A->start;
ZkLockTest::wait_connected($A, 'A did not connect after its restart');
released('PostgreSQL crashed and restarted');
is(zk_count($zk, "$Q/entries/$item"), 0, 'the item node has no child');

# 5. kazoo holds it and lets go: not counted
my $kz = queue_kazoo($zk);
is($kz->cmd("get $Q 10"), 'item ' . unpack('H*', 'p1'), 'kazoo gets the item');
is($kz->cmd("release $Q"), 'true', 'kazoo releases it');
is($B->safe_psql('postgres', "SELECT attempts FROM zk_queue_peek('poison')"), '4',
	"a peek shows zklock's four hand-outs (kazoo's is not counted)");

# 6. consumed on B
my $b2 = new_session($B, name => 'b2');
is(hand_out($b2), '5:p1', 'fifth hand-out (B): attempts 5');
$b2->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'consumed: no item left');
released('consume');

# kazoo consumes an item zklock handed out before
$A->safe_psql('postgres', "SELECT zk_enqueue('poison', 'p2')");
ok(scalar(zk_wait_count($zk, "$Q/entries", 1, 30)), 'a second item is published');
my $a4 = new_session($A, name => 'a4');
is(hand_out($a4), '1:p2', 'A hands it out (attempts 1)');
$a4->query_safe('ROLLBACK');
released('second item rolled back');
is($kz->cmd("get $Q 10"), 'item ' . unpack('H*', 'p2'), 'kazoo gets it');
is($kz->cmd("consume $Q"), 'true', 'kazoo consumes an item zklock counted');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'no item left');

# a node another client put under an item, in the way of the counting
# child: the item is handed out uncounted (attempts NULL), the one behind it
# as ever; their consume (one multi) waits until the node is deleted
$A->safe_psql('postgres', "SELECT zk_enqueue('poison', ARRAY['p3', 'p4'])");
ok(scalar(zk_wait_count($zk, "$Q/entries", 2, 30)), 'two more items are published');
($item) = map { $_->{name} } zk_nodes_of($zk, "$Q/entries");
zkq_or_die($zk, 'create', "$Q/entries/$item/zklock-handout", 'garbage');
is($A->safe_psql('postgres',
	"SELECT string_agg(coalesce(attempts::text, 'null') || ':' || body, ',') FROM zk_dequeue('poison', '5s', 2)"),
	'null:p3,1:p4', 'the item under the foreign node is handed out uncounted, the next one counted');
ok($A->wait_for_log(qr/cannot count the hand-outs of queue item/, 0), 'a WARNING says so');
sleep 2;
is(zk_count($zk, "$Q/taken"), 2,
	'their consume waits, both claimed, while the foreign node is there (one multi ends them)');
zkq_or_die($zk, 'delete', "$Q/entries/$item/zklock-handout");
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 90)) && scalar(zk_wait_count($zk, "$Q/taken", 0, 30)),
	'once it is deleted the consume goes through');

# an item another client wrote with an ACL that lets zklock read it but not
# create under it: handed out uncounted and consumed (through entries/)
sub kazoo_item_readonly
{
	my ($parent, $data) = @_;
	my $py = <<'PY';
import sys
from kazoo.client import KazooClient
from kazoo.security import make_acl
z = KazooClient(hosts=sys.argv[1]); z.start()
p = z.create(sys.argv[2] + '/entry-100-', sys.argv[3].encode(),
             acl=[make_acl('world', 'anyone', read=True)], sequence=True)
print(p.rsplit('/', 1)[1])
z.stop()
PY
	my ($out, $err);
	IPC::Run::run([ $ZkLockTest::PYTHON, '-c', $py, $zk->{hosts}, $parent, $data ],
		'>', \$out, '2>', \$err) or die "kazoo create failed: $err";
	chomp $out;
	return $out;
}
kazoo_item_readonly("$Q/entries", 'read-only');
is($A->safe_psql('postgres',
	"SELECT coalesce(attempts::text, 'null') || ':' || body FROM zk_dequeue('poison', '5s')"),
	'null:read-only', 'a read-only item of another client is handed out uncounted');
ok(scalar(zk_wait_count($zk, "$Q/entries", 0, 30)), 'and consumed');

# zk_queue_stats: each cluster's own counts since its worker started (A's
# since its last restart: p2 rolled back; p3, p4 and the read-only item
# consumed)
my $stats = q{SELECT handed_out || '/' || consumed || '/' || released FROM zk_queue_stats()
	WHERE queue = 'poison'};
is($B->safe_psql('postgres', $stats), '2/1/1',
	'B counted 2 hand-outs, 1 consume, 1 release (the terminated backend)');
is($A->safe_psql('postgres', $stats), '4/3/1',
	'A, since its restart, counted 4 hand-outs, 3 consumes, 1 release');

$kz->quit;
$_->quit foreach ($a4, $b2);
$A->stop;
$B->stop;
done_testing();
