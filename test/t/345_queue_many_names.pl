
# 345_queue_many_names.pl - many queue names over time: the worker keeps
# per-queue state only while a queue is in use (zk_status().queues_tracked),
# and a queue it forgot works as before when it comes back.
#
# - 300 queues, each given items in one transaction and drained by another:
#   the worker tracks them (a state for the consumers, one for the
#   publications of each), then forgets them within a minute of quiet.
# - Meanwhile a consumer waits on one queue and another session holds a
#   claim on another in an open transaction: both queues stay tracked,
#   the waiter is served by an item published after the sweeps, and the
#   claim's COMMIT consumes its item (nothing left in ZooKeeper).
# - 300 other queues after that: the count goes up and down again the same
#   way (the states are reused, not added to).
# - A forgotten queue comes back: items published before and after are all
#   dequeued once, in FIFO order.
# - zk_queues counts 600 queues (it lists 256 at a time).
# - PostgreSQL crashes while one transaction holds claims in 300 queues: the
#   worker's resolution lists every queue's taken (256 at a time) and
#   releases them all; each item is dequeued again.  Nothing is left in
#   ZooKeeper, and no watch.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep sleep);
use ZkLockTest;

my $zk = zk_start();
# one transaction below claims in 300 queues at once (an entry each): more
# than zklock.max_locks_per_backend's default, a quarter of 1024
my $node = zk_node('qmany', $zk,
	session_timeout => '10s',
	connect_timeout => '5s',
	conf => "zklock.max_locks_per_backend = 512\n");

my $Q = '/zklock/queues';

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub tracked { return zk_status_value($node, 'queues_tracked'); }

my $WC0 = zk_watch_count($zk);
is(tracked(), '0', 'no queue tracked at first');

# n queues named "$prefix-1" .. "$prefix-n", two items each, published by one
# transaction, then drained by one transaction
sub fill_and_drain
{
	my ($prefix, $n) = @_;
	sql(qq{SELECT count(zk_enqueue('$prefix-' || i, 'a' || i)) + count(zk_enqueue('$prefix-' || i, 'b' || i))
	       FROM generate_series(1, $n) i});
	return sql(qq{SELECT count(*) FROM generate_series(1, $n) i,
	              LATERAL zk_try_dequeue('$prefix-' || i, 5) m
	              WHERE m.body IN ('a' || i, 'b' || i)});
}

# a consumer that waits across the sweeps, and a claim held across them
my $waiter = new_session($node, name => 'waiter');
$waiter->send(q{SELECT body FROM zk_dequeue('kept-wait', '90s')});
sql(q{SELECT zk_enqueue('kept-claim', 'held')});
my $holder = new_session($node, name => 'holder');
$holder->query_safe('BEGIN');
is($holder->query_safe(q{SELECT body FROM zk_try_dequeue('kept-claim')}), 'held',
	'a claim is held in an open transaction');

is(fill_and_drain('one', 300), '600', '300 queues: 600 items published and dequeued');
my $t1 = tracked();
ok($t1 >= 600, "the worker tracks them ($t1 states)");

my $t0 = time();
ok(wait_until(sub { tracked() <= 4 }, 60, 0.5),
	sprintf('idle queues forgotten (%s states left after %.0f s)', tracked(), time() - $t0));
ok(tracked() >= 2, 'the waited-on and the claimed queue are still tracked');

sql(q{SELECT zk_enqueue('kept-wait', 'late')});
my $r = $waiter->wait(30);
is($r->{sqlstate} . ':' . $r->{out}, '00000:late', 'the waiter is served by an item published after the sweeps');
$holder->query_safe('COMMIT');
ok(wait_until(sub { zk_count($zk, "$Q/kept-claim/entries") == 0 && zk_count($zk, "$Q/kept-claim/taken") == 0 }, 15, 0.2),
	'the claim held across the sweeps is consumed at COMMIT');

is(fill_and_drain('two', 300), '600', '300 other queues: 600 items published and dequeued');
my $t2 = tracked();
ok($t2 >= 600, "tracked again ($t2 states)");
ok(wait_until(sub { tracked() == 0 }, 60, 0.5), 'and forgotten again: nothing tracked')
  or diag 'still tracked: ' . tracked();

# a forgotten queue comes back
sql(q{SELECT zk_enqueue('one-7', 'x' || i) FROM generate_series(1, 3) i});
sql(q{SELECT zk_enqueue('one-7', 'y' || i) FROM generate_series(1, 3) i});
is(sql(q{SELECT string_agg(body, ',' ORDER BY msg_id) FROM zk_try_dequeue('one-7', 10)}),
	'x1,x2,x3,y1,y2,y3', 'a forgotten queue works again: every item once, in order');
my $c = new_session($node, name => 'c');
$c->send(q{SELECT body FROM zk_dequeue('one-8', '30s')});
sleep 1;
sql(q{SELECT zk_enqueue('one-8', 'woken')});
$r = $c->wait(30);
is($r->{sqlstate} . ':' . $r->{out}, '00000:woken', 'a waiter on a forgotten queue is woken by a publication');

# zk_queues counts more queues than it lists at once (256)
is(sql(q{SELECT count(*) || '/' || sum(items) || '/' || sum(claimed) FROM zk_queues WHERE queue ~ '^(one|two)-'}),
	'600/0/0', 'zk_queues: the 600 queues, empty');

# a crash while one transaction holds a claim in each of 300 queues: the
# resolution lists taken of every queue (more than 256, so in several
# windows) and releases the claims of the aborted transaction
sql(q{SELECT count(zk_enqueue('three-' || i, 'c' || i)) FROM generate_series(1, 300) i});
my $crash = new_session($node, name => 'crash');
$crash->query_safe('BEGIN');
is($crash->query_safe(q{SELECT count(*) FROM generate_series(1, 300) i, LATERAL zk_try_dequeue('three-' || i) m}),
	'300', 'a transaction claims one item in each of 300 queues');
is(sql(q{SELECT sum(items) || '/' || sum(claimed) FROM zk_queues WHERE queue ~ '^three-'}), '0/300',
	'zk_queues: 300 claims, no free item');
$node->stop('immediate');
$crash->quit;
$node->start;
is(wait_for_state($node, "connected", 60)->{state}, "connected", "connected again after the crash");
ok(wait_until(sub { sql(q{SELECT sum(items) || '/' || sum(claimed) FROM zk_queues WHERE queue ~ '^three-'}) eq '300/0' }, 60, 0.5),
	'after the crash every claim is released: 300 items back, no claim');
is(sql(q{SELECT count(*) FROM generate_series(1, 300) i, LATERAL zk_try_dequeue('three-' || i) m WHERE m.body = 'c' || i}),
	'300', 'and each is dequeued again');

my ($rc, $tree) = zkq($zk, 'tree', $Q);
die "zkq tree $Q failed" if $rc != 0;
my @names = grep { m{^\Q$Q\E/(?:one|two|three)-\d+$} } map { (split / /)[0] } split /\n/, $tree;
is(scalar @names, 900, 'the 900 queues are there in ZooKeeper');
my $left = grep { m{^\Q$Q\E/(?:one|two|three)-\d+/(?:entries|taken)/} } map { (split / /)[0] } split /\n/, $tree;
is($left, 0, 'nothing left in the 900 queues');
ok(wait_until(sub { zk_watch_count($zk) == $WC0 }, 15, 0.3), 'no watch left on the server')
  or diag 'watches: ' . zk_watch_count($zk) . " (before: $WC0)";

$_->quit foreach ($waiter, $holder, $c);
$node->stop;
zk_stop($zk);
done_testing();
