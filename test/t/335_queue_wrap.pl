
# 335_queue_wrap.pl - a queue whose entries parent has used up ZooKeeper's
# sequence counter.
#
# ZooKeeper names a sequential child after its parent's count of child
# creates, a signed 32-bit number.  A long-lived queue gets there (each item
# is one create under entries; 2^31 of them at 1000 items/s is 25 days).
# ZooKeeper 3.8 then names every new child ...2147483647 again, so a create
# fails with "node exists" while that entry is there.  2^31 creates cannot
# run in a test: ZooKeeper starts from a snapshot written by
# test/java/MakeWrapSnapshot.java in which /zklock/queues/wq/entries has
# counted 2^31 - 5 creates (and holds one foreign child, "keeper").
#
# Proves: the items up to the end of the counter are served in order; an
# enqueue committed after the end loses nothing: its items stay in their
# transaction node and the worker log says what happened and what to do;
# the documented way out (consume, delete entries, restart the worker)
# publishes them, and the queue then works as before; nothing is left.

use strict;
use warnings FATAL => 'all';

use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $ENTRIES = '/zklock/queues/wq/entries';
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
	"$zk->{dir}/data", $START, $ENTRIES ], 180);
is($rc, 0, 'MakeWrapSnapshot wrote a snapshot of a queue near the end of its counter')
  or diag "$out\n$err";
zk_restart($zk);

my $node = zk_node('qwrap', $zk);
sub sql { return $node->safe_psql('postgres', $_[0]); }
sub entries { return join(',', zk_children($zk, $ENTRIES)); }

# five items: the last names of the counter
sql("SELECT zk_enqueue('wq', 'item-$_')") foreach 1 .. 5;
is(entries(), join(',', map { 'entry-100-' . ($START + $_) } 0 .. 4) . ',keeper',
	'five items named up to the end of the counter (2147483643 .. 2147483647)');

# the sixth: committed, kept in its transaction node, explained in the log
my $log_at = -s $node->logfile;
my ($crc, $cout, $cerr) = $node->psql('postgres', "SELECT zk_enqueue('wq', 'item-6')");
is($crc, 0, 'an enqueue after the end of the counter commits (its items are kept in ZooKeeper)');
is(zk_count($zk, '/zklock/txns'), 1, 'its transaction node stays, with its items');
my $log = '';
ok( wait_until(
		sub {
			$log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_at);
			$log =~ /sequence counter of \Q$ENTRIES\E has run out/;
		},
		20),
	'the worker log says the sequence counter has run out');
like($log, qr/HINT:  Consume or purge the queue, delete \Q$ENTRIES\E/, 'and what to do');

# the items before the end come out in order
is(sql("SELECT string_agg(body, ',' ORDER BY msg_id) FROM zk_try_dequeue('wq', 10)"),
	join(',', map { "item-$_" } 1 .. 5), 'the five items are dequeued in order');
is(sql("SELECT zk_queue_length('wq')"), '0', 'item-6 is not in the queue yet');

# the way out the hint gives
ok(zk_exists($zk, "$ENTRIES/keeper"), 'the foreign child is still there');
ZkLockTest::zkq($zk, 'delete', "$ENTRIES/keeper");
ZkLockTest::zkq($zk, 'delete', $ENTRIES);
ok(!zk_exists($zk, $ENTRIES), 'entries deleted (through ZooKeeper)');
my $wpid = worker_pid($node);
sql('SELECT pg_terminate_backend(worker_pid) FROM zk_status()');
my $st = wait_for_state($node, sub { $_[0]->{state} eq 'connected' && $_[0]->{worker_pid} != $wpid }, 30);
isnt($st->{worker_pid}, $wpid, 'a new worker runs');
ok(wait_until(sub { zk_count($zk, '/zklock/txns') == 0 }, 20), 'the new worker published the kept items');
is(entries(), 'entry-100-0000000000', 'named from a new counter');
sql("SELECT zk_enqueue('wq', 'item-7')");
is(sql("SELECT string_agg(body, ',' ORDER BY msg_id) FROM zk_try_dequeue('wq', 10)"), 'item-6,item-7',
	'the kept item and a new one are dequeued in order');
is(zk_count($zk, $ENTRIES) . '/' . zk_count($zk, '/zklock/queues/wq/taken') . '/' . zk_count($zk, '/zklock/txns'),
	'0/0/0', 'nothing left: no entry, claim or transaction node');

$node->stop;
done_testing();
