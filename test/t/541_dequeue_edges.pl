
# 541_dequeue_edges.pl - a dequeue's byte cap from its first claims, and the
# claims whose payloads were freed once copied out still come back exactly
# once when their transaction does not commit (issue 23, payload memory).
#
# A. zklock.max_answer_bytes = 2MB (the lowest), items of 900 kB: before the
#    first read answered, a dequeue sent 4 claims at once, whatever the cap,
#    so it returned 3.6 MB where the cap allows 2 MB.  The first window is
#    now sized by the cap and the largest item ZooKeeper stores by default
#    (1 MB): at most 2 items here; repeated calls drain the queue exactly
#    once.
# B. Payloads leave the dsa once the rows are copied out; a transaction that
#    then rolls back (whole, to a savepoint, by PREPARE's refusal, or by its
#    backend being terminated) gives every item back, exactly once.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

$ENV{ZK_HEAP} = '1g';
my $zk = zk_start();
my $node = zk_node('edges', $zk, session_timeout => '10s',
	conf => "max_prepared_transactions = 2\nzklock.max_item_size = '976kB'\nzklock.max_transaction_size = '976kB'\n");
sub sql { return $node->safe_psql('postgres', $_[0]); }
sub qpath { return sql("SELECT zk_path('queue', '$_[0]')"); }

my $ITEM = 900000;

#
# A. The cap holds from the first claims
#
{
	my $F = new_session($node, name => 'fill');
	$F->query_safe("SELECT zk_enqueue('cap2', repeat(chr(65 + $_), $ITEM))") foreach (0 .. 5);
	$F->quit;
	my $s = new_session($node, name => 'cap');
	$s->query_safe("SET zklock.max_answer_bytes = '2MB'");
	my (%seen, $max_n, $calls);
	$max_n = 0;
	$calls = 0;
	while ($calls++ < 20)
	{
		my $r = $s->query_safe(
			"SELECT coalesce(string_agg(left(body, 1), ''), '') FROM zk_dequeue('cap2', '0', 100)");
		last if $r eq '';
		$max_n = length($r) if length($r) > $max_n;
		$seen{$_}++ foreach split //, $r;
	}
	ok($max_n >= 1 && $max_n <= 2,
		"A: with a 2 MB cap a dequeue of 900 kB items returns at most 2 ($max_n)");
	is(join('', sort keys %seen), 'ABCDEF', 'A: repeated dequeues drained all 6 items');
	is((grep { $_ != 1 } values %seen), 0, 'A: each exactly once');
	is(zk_count($zk, qpath('cap2') . '/taken'), 0, 'A: no claim left');
	is(zk_count($zk, qpath('cap2') . '/entries'), 0, 'A: no item left');
	$s->quit;
}

#
# B. Claims whose payloads were freed come back when not committed
#
sub items_back
{
	my ($q, $want, $what) = @_;
	ok(wait_until(sub { zk_count($zk, qpath($q) . '/taken') == 0 }, 20), "$what: no claim left");
	is(sql("SELECT string_agg(body, ',' ORDER BY body) FROM zk_try_dequeue('$q', 100)"),
		$want, "$what: the items come back, each once");
}

sql("SELECT zk_enqueue('rb', 'r' || i) FROM generate_series(1, 3) i");
{
	my $s = new_session($node, name => 'rb');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT count(*) FROM zk_dequeue('rb', '0', 3)"), 3, 'B1: three dequeued');
	is(zk_count($zk, qpath('rb') . '/taken'), 3, 'B1: three claims held');
	$s->query_safe('ROLLBACK');
	items_back('rb', 'r1,r2,r3', 'B1 ROLLBACK');
	$s->quit;
}

sql("SELECT zk_enqueue('sp', 's' || i) FROM generate_series(1, 4) i");
{
	my $s = new_session($node, name => 'sp');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT string_agg(body, ',') FROM zk_dequeue('sp', '0', 1)"), 's1', 'B2: s1 before the savepoint');
	$s->query_safe('SAVEPOINT a');
	is($s->query_safe("SELECT string_agg(body, ',') FROM zk_dequeue('sp', '0', 2)"), 's2,s3', 'B2: s2, s3 after it');
	$s->query_safe('ROLLBACK TO SAVEPOINT a');
	ok(wait_until(sub { zk_count($zk, qpath('sp') . '/taken') == 1 }, 20), 'B2: the savepoint\'s claims went back');
	is($s->query_safe("SELECT string_agg(body, ',') FROM zk_dequeue('sp', '0', 3)"), 's2,s3,s4',
		'B2: the same transaction takes them again, and s4');
	$s->query_safe('COMMIT');
	ok(wait_until(sub { zk_count($zk, qpath('sp') . '/entries') == 0 }, 20), 'B2: COMMIT consumed all four');
	is(zk_count($zk, qpath('sp') . '/taken'), 0, 'B2: no claim left');
	$s->quit;
}

sql("SELECT zk_enqueue('pp', 'p' || i) FROM generate_series(1, 2) i");
{
	my $s = new_session($node, name => 'pp');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT count(*) FROM zk_dequeue('pp', '0', 2)"), 2, 'B3: two dequeued');
	my $r = $s->query("PREPARE TRANSACTION 'zkp'");
	like($r->{err} // '', qr/cannot prepare a transaction that used zookeeper queues/, 'B3: PREPARE refused');
	$s->query('ROLLBACK');
	is(sql("SELECT count(*) FROM pg_prepared_xacts"), 0, 'B3: nothing prepared');
	items_back('pp', 'p1,p2', 'B3 PREPARE refused');
	$s->quit;
}

sql("SELECT zk_enqueue('tb', 't' || i) FROM generate_series(1, 2) i");
{
	my $s = new_session($node, name => 'tb');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT count(*) FROM zk_dequeue('tb', '0', 2)"), 2, 'B4: two dequeued');
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	sql("SELECT pg_terminate_backend($pid)");
	items_back('tb', 't1,t2', 'B4 backend terminated');
}

zk_stop($zk);
done_testing();
