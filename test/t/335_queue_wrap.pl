
# 335_queue_wrap.pl - a queue whose entries parent reaches the end of
# ZooKeeper's sequence counter.
#
# ZooKeeper names a sequential child after its parent's count of child
# creates, a signed 32-bit number.  A long-lived queue gets there (each item
# is one create under entries; 2^31 of them at 1000 items/s is 25 days).
# ZooKeeper 3.8 then names every new child ...2147483647 again (a create
# fails with "node exists" while that entry is there), or with negative
# numbers.  2^31 creates cannot run in a test: ZooKeeper starts from a
# snapshot written by test/java/MakeWrapSnapshot.java in which
# /zklock/queues/wq/entries has counted 2^31 - 5 creates (and holds one
# foreign child, "keeper").
#
# Proves: a publication named near the end switches the cluster to naming
# the queue's items itself (entry-100-2147483648 on, next number in
# /zklock/queues/wq/next); items of a kazoo producer up to the end and
# zklock's after it are served in commit order; a transaction's items get
# consecutive names; a second cluster sees next and names its items from it,
# and the first, whose idea of next is then stale, reads it again instead of
# taking a name twice; garbage written into next, or next deleted, costs a
# re-read and a listing, never a duplicate name; a worker that starts
# without next in place finds its create refused at the end of the counter
# and switches; nothing is lost, left behind or warned about; and deleting
# entries and next (once drained) returns the queue to ZooKeeper's counter.

use strict;
use warnings FATAL => 'all';

use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use ZkProxy;

my $QP = '/zklock/queues/wq';
my $ENTRIES = "$QP/entries";
my $NEXT = "$QP/next";
my $START = 2**31 - 5;

my $CP = $ZkLockTest::ZK_CLASSPATH;
my $classes = "$PostgreSQL::Test::Utils::tmp_check/wrap_classes_q";
rmtree($classes);
mkdir $classes or die "cannot create $classes: $!";
my ($rc, $out, $err) = ZkLockTest::_run([ 'javac', '-nowarn', '-d', $classes, '-cp', $CP,
	"$ZkLockTest::SRC/test/java/MakeWrapSnapshot.java" ], 180);
is($rc, 0, 'MakeWrapSnapshot.java compiles') or die "javac: $out $err";

# ZooKeeper on the snapshot: start once, stop, replace its data, start again
my $zk = zk_start(name => 'qwrap');
zk_stop($zk) or die 'could not stop ZooKeeper to replace its data';
rmtree("$zk->{dir}/data/version-2");
($rc, $out, $err) = ZkLockTest::_run([ 'java', '-cp', "$classes:$CP", 'MakeWrapSnapshot',
	"$zk->{dir}/data", $START, $ENTRIES, '/zklock/queues/vq:' . (2**31 - 3) ], 180);
is($rc, 0, 'MakeWrapSnapshot wrote a snapshot of a queue near the end of its counter')
  or diag "$out\n$err";
zk_restart($zk);

# A talks to ZooKeeper through the fault proxy
my $p = proxy_start($zk);
my $nodeA = zk_node('qwrapA', $p->{hosts}, conf => "restart_after_crash = on\n");
my $nodeB = zk_node('qwrapB', $zk);
my %log_at = (A => -s $nodeA->logfile, B => -s $nodeB->logfile);
sub sqla { return $nodeA->safe_psql('postgres', $_[0]); }
sub sqlb { return $nodeB->safe_psql('postgres', $_[0]); }
sub entries { return join(',', zk_children($zk, $ENTRIES)); }
sub last_entry { my @e = grep { /^entry-/ } zk_children($zk, $ENTRIES); return $e[-1] // ''; }
sub next_value { my $v = zk_get($zk, $NEXT); return $v // "none"; }

# test/queue_attack.py (kazoo): put, create, rmtree
sub qa
{
	my ($verb, @args) = @_;
	my ($r, $o, $e) = ZkLockTest::_run([ $ZkLockTest::PYTHON, "$ZkLockTest::SRC/test/queue_attack.py",
		$zk->{hosts}, $verb, @args ], 120);
	die "queue_attack.py $verb @args: rc $r: $o $e" if $r != 0;
	return $o;
}

sub logs_since
{
	my ($n, $k) = @_;
	return PostgreSQL::Test::Utils::slurp_file($n->logfile, $log_at{$k});
}

# 1. near the end: published by the counter, then the switch
sqla("SELECT zk_enqueue('wq', 'item-1')");
is(entries(), 'entry-100-2147483643,keeper', 'item-1 named by the counter, near its end');
ok(wait_until(sub { logs_since($nodeA, 'A') =~ /queue "wq": zookeeper's sequence counter of its entries is near its end; this cluster names its items from \Q$QP\E\/next/ }, 10),
	'A logs that it names the items of wq itself from now on');

# 2. a kazoo producer takes the counter to its end
qa('put', $QP, "k-$_") foreach 1 .. 4;
is(last_entry(), 'entry-100-2147483647', 'kazoo put four items, the last names of the counter');

# 3. past the end: zklock names them, and commits return once they are there
sqla("SELECT zk_enqueue('wq', 'item-2')");
is(last_entry(), 'entry-100-2147483648', 'item-2 is entry-100-2147483648, after every name of the counter');
is(next_value(), '2147483649', 'next holds the next free number');
sqla("BEGIN; SELECT zk_enqueue('wq', 'item-3' || c) FROM unnest(ARRAY['a','b','c']) c; COMMIT;");
is(join(',', (grep { /^entry-/ } zk_children($zk, $ENTRIES))[-3 .. -1]),
	'entry-100-2147483649,entry-100-2147483650,entry-100-2147483651',
	"one transaction's three items: consecutive names");

# 4. a second cluster: it sees next and names from it
sqlb("SELECT zk_enqueue('wq', 'b-1')");
is(last_entry(), 'entry-100-2147483652', 'cluster B names its item from next');
ok(wait_until(sub { logs_since($nodeB, 'B') =~ /queue "wq": another cluster names its items itself/ }, 10),
	'B logs why');

# 5. A's idea of next is stale now: it reads it again, no name twice
sqla("SELECT zk_enqueue('wq', 'item-4')");
is(last_entry(), 'entry-100-2147483653', "A's stale next is refused and read again: item-4 is ...53");

# 6. garbage in next: the listing decides
qa('rmtree', $NEXT);
qa('create', $NEXT, unpack('H*', 'garbage'));
sqla("SELECT zk_enqueue('wq', 'item-5')");
is(last_entry(), 'entry-100-2147483654', 'next overwritten with garbage: item-5 is ...54');
is(next_value(), '2147483655', 'and next is repaired');

# 7. next deleted: created again past every name there
qa('rmtree', $NEXT);
sqla("SELECT zk_enqueue('wq', 'item-6')");
is(last_entry(), 'entry-100-2147483655', 'next deleted: item-6 is ...55');
is(next_value(), '2147483656', 'and next is there again');

# 7b. the reply of a publishing multi lost after the multi landed
my $cut = proxy_rule($p, 'cut-after-request multi');
sqla("SELECT zk_enqueue('wq', 'item-6b')");
ok(proxy_wait_fired($p, $cut, 5), 'the publishing multi of item-6b landed and its reply was lost');
proxy_cmd($p, 'reset');
is(last_entry(), 'entry-100-2147483656', 'item-6b is ...56');
is(scalar(grep { /^entry-/ } zk_children($zk, $ENTRIES)), 14, 'published once: 14 items');

# 7c. B moves next on; A's stale read is refused, and the reply of its
# read of next is lost (the cut is on that path: the COMMIT's other reads,
# the totals' getData sent beside its transaction node's create, pass)
sqlb("SELECT zk_enqueue('wq', 'b-2')");
is(last_entry(), 'entry-100-2147483657', 'b-2 is ...57');
$cut = proxy_rule($p, "cut-after-request getData path=$NEXT");
sqla("SELECT zk_enqueue('wq', 'item-6c')");
ok(proxy_wait_fired($p, $cut, 5), "the reply of A's read of next was lost");
proxy_cmd($p, 'reset');
is(last_entry(), 'entry-100-2147483658', 'item-6c is ...58, after it');
is(scalar(grep { /^entry-/ } zk_children($zk, $ENTRIES)), 16, '16 items, none twice');

# 8. a new worker without next in place: the counter refuses, it switches
qa('rmtree', $NEXT);
my $wpid = worker_pid($nodeA);
sqla('SELECT pg_terminate_backend(worker_pid) FROM zk_status()');
my $st = wait_for_state($nodeA, sub { $_[0]->{state} eq 'connected' && $_[0]->{worker_pid} != $wpid }, 30);
isnt($st->{worker_pid}, $wpid, 'A has a new worker');
sqla("SELECT zk_enqueue('wq', 'item-7')");
is(last_entry(), 'entry-100-2147483659', "the counter's create is refused at its end: item-7 is ...59");
ok(wait_until(sub { logs_since($nodeA, 'A') =~ /sequence counter of its entries has run out; this cluster names/ }, 10),
	'A logs that the counter ran out');
is(zk_count($zk, '/zklock/txns'), 0, 'no transaction node kept');

# 8b. another client sets next near the end of ten digits: not believed
qa('rmtree', $NEXT);
qa('create', $NEXT, unpack('H*', '9999999999'));
sqla("SELECT zk_enqueue('wq', 'item-7b')");
is(last_entry(), 'entry-100-2147483660', 'next = 9999999999 is not believed: item-7b is ...60');
is(next_value(), '2147483661', 'and next is repaired');

# 8c. a committed publication hangs (its multi dropped), then the worker is
# killed: the crash restart's resolution publishes it, named from next
my $drop = proxy_rule($p, 'drop-requests multi');
my $hung = new_session($nodeA, name => 'hung');
$hung->query_safe("SET zklock.commit_timeout = '2s'");
my $r = $hung->query("SELECT zk_enqueue('wq', 'item-7c')", 30);
is($r->{sqlstate}, '00000', 'the COMMIT of item-7c returns while its publication hangs') or diag $r->{err};
is(last_entry(), 'entry-100-2147483660', 'item-7c is not published yet');
is(zk_count($zk, '/zklock/txns'), 1, 'its transaction node holds it');
my $crash_at = -s $nodeA->logfile;
kill 'KILL', worker_pid($nodeA);
proxy_cmd($p, 'reset');
$hung->kill_client;
is(wait_for_state($nodeA, 'connected', 60)->{state}, 'connected', 'A is back after the crash restart');
ok(wait_until(sub { last_entry() eq 'entry-100-2147483661' }, 30),
	"the restarted worker's resolution publishes item-7c, named from next: ...61")
  or diag entries();
ok(wait_until(sub { zk_count($zk, '/zklock/txns') == 0 }, 10), 'no transaction node left');
my $after = PostgreSQL::Test::Utils::slurp_file($nodeA->logfile, $crash_at);
like($after, qr/queue "wq": another cluster names its items itself/,
	'the new worker looked for next before it published (and found it)');
unlike($after, qr/counter of its entries has run out/, 'no create of the counter was tried');

# 9. everything in commit order, once
my $all = sqla("SELECT string_agg(body, ',' ORDER BY n) FROM zk_try_dequeue('wq', 100) "
	  . 'WITH ORDINALITY AS t(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n)');
is($all, 'item-1,k-1,k-2,k-3,k-4,item-2,item-3a,item-3b,item-3c,b-1,item-4,item-5,item-6,item-6b,b-2,item-6c,item-7,item-7b,item-7c',
	'every item dequeued once, in commit order');
is(entries(), 'keeper', 'only the foreign child is left in entries');
is(zk_count($zk, "$QP/taken") . '/' . zk_count($zk, '/zklock/txns'), '0/0', 'no claim, no transaction node');
foreach my $k ([ 'A', $nodeA ], [ 'B', $nodeB ])
{
	unlike(logs_since($k->[1], $k->[0]), qr/could not publish|refuses to publish/, "no publication failed on $k->[0]");
}

# 10. back to ZooKeeper's counter: drained, entries and next deleted, workers restarted
qa('rmtree', $ENTRIES);
qa('rmtree', $NEXT);
foreach my $n ($nodeA, $nodeB)
{
	my $p = worker_pid($n);
	$n->safe_psql('postgres', 'SELECT pg_terminate_backend(worker_pid) FROM zk_status()');
	wait_for_state($n, sub { $_[0]->{state} eq 'connected' && $_[0]->{worker_pid} != $p }, 30);
}
sqla("SELECT zk_enqueue('wq', 'item-8')");
sqlb("SELECT zk_enqueue('wq', 'b-9')");
is(entries(), 'entry-100-0000000000,entry-100-0000000001', 'named from a new counter again');
is(sqlb("SELECT string_agg(body, ',' ORDER BY n) FROM zk_try_dequeue('wq', 10) "
	  . 'WITH ORDINALITY AS t(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n)'), 'item-8,b-9',
	'and served in order');
is(zk_count($zk, $ENTRIES) . '/' . zk_count($zk, "$QP/taken") . '/' . zk_count($zk, '/zklock/txns'),
	'0/0/0', 'nothing left: no entry, claim or transaction node');

# 11. next at the end of its own 32-bit version: deleted and created again
sub next_version
{
	my ($q) = @_;
	my ($r, $o, $e) = ZkLockTest::_run([ $ZkLockTest::PYTHON, '-c',
		'import sys; from kazoo.client import KazooClient; z = KazooClient(hosts=sys.argv[1]); z.start(); '
		  . 'print(z.get(sys.argv[2])[1].version); z.stop()', $zk->{hosts}, "/zklock/queues/$q/next" ], 60);
	chomp $o;
	return $r == 0 ? $o : "error $e";
}
is(next_version('vq'), 2**31 - 3, "vq's next is at version 2^31 - 3");
sqla("SELECT zk_enqueue('vq', 'v-' || i) FROM generate_series(1, 1) i");
is(next_version('vq'), 2**31 - 2, 'set once: version 2^31 - 2');
sqla("SELECT zk_enqueue('vq', 'v-2')");
is(next_version('vq'), 0, 'then deleted and created again (version 0), not driven into the negative');
sqla("SELECT zk_enqueue('vq', 'v-3')");
is(join(',', zk_children($zk, '/zklock/queues/vq/entries')),
	'entry-100-2147483648,entry-100-2147483649,entry-100-2147483650', "vq's items named on from next");
is(zk_get($zk, '/zklock/queues/vq/next') . '/' . next_version('vq'), '2147483651/1', 'next 2147483651, version 1');
# a kazoo consumer takes the first of them, SQL the rest
($rc, $out, $err) = ZkLockTest::_run([ $ZkLockTest::PYTHON, '-c',
	'import sys; from kazoo.client import KazooClient; z = KazooClient(hosts=sys.argv[1]); z.start(); '
	  . 'q = z.LockingQueue("/zklock/queues/vq"); v = q.get(10); print(v.decode(), q.consume()); z.stop()',
	$zk->{hosts} ], 60);
is("$rc $out", "0 v-1 True\n", "kazoo's LockingQueue gets and consumes the first item named from next")
  or diag $err;
is(sqlb("SELECT string_agg(body, ',' ORDER BY n) FROM zk_try_dequeue('vq', 10) "
	  . 'WITH ORDINALITY AS t(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n)'), 'v-2,v-3',
	'SQL the other two, in order');
is(zk_count($zk, '/zklock/queues/vq/entries') . '/' . zk_count($zk, '/zklock/queues/vq/taken'), '0/0',
	'vq: no entry or claim left');
unlike(logs_since($nodeA, 'A'), qr/could not publish|refuses to publish/, 'no publication failed');

$nodeA->stop;
$nodeB->stop;
done_testing();
