
# 357_queue_metrics.pl - a queue's metrics: zk_queues' new columns and the
# view zk_queue_metrics (issue 38).
#
# Through a counting proxy (test/zkproxy.py: listings per path):
# 1. Queue "mq": four items, 1.5 s later five more; a transaction holds
#    three claims (the oldest three), two items are delayed an hour, and a
#    dead-letter policy (2, 'mq.dlq') is set.  Every column is checked
#    exactly: ready 6, delayed 2, claimed 3, the policy, dead_letters 0, the
#    oldest ready item's age between the times around the first COMMIT (so
#    older than the second five), the oldest claim's between the times
#    around the dequeue; 2 s later the oldest ready age is 2 s more (and at
#    least 2 s).  A second dequeue claims the oldest ready item within the
#    TTL: the age is the next one's, of the second five (not the claimed
#    item's, from the cache's candidates); the oldest claim stays S1's
#    until S1 commits, then it is S2's.  Counters after
#    a COMMIT (consumed 3) and a ROLLBACK (released 1), handed_out 4; no
#    claim left: oldest_claim_age NULL.
# 2. Queue "pq" with (1, 'pq.dlq'): one item handed out and rolled back,
#    then moved to pq.dlq at its next claim: pq.dlq has one item, pq's
#    dead_letters is 1 and dead_lettered 1.
# 3. Queue "big" with 3000 items: the first read lists its entries once,
#    a second read within the TTL (10 s) lists nothing (the proxy counts
#    the listings of big/entries) and gives the same item's age, later; once
#    the TTL is past, a read lists again.  With zklock.max_children below
#    its items, it is not listed at all: the age comes from the cached
#    items while the oldest one is still there.  40 claims of big: the
#    oldest claim's age (their reads go 32 at a time).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $proxy = proxy_start($zk);
my $node = zk_node('metrics', $proxy->{hosts}, session_timeout => '10s', connect_timeout => '3s');

sub sql
{
	my ($q) = @_;
	return $node->safe_psql('postgres', $q);
}

# the number of listings of $path the proxy forwarded
sub listed
{
	my ($path) = @_;
	return proxy_stats($proxy)->{listed}{$path} // 0;
}

# the epoch (PostgreSQL's clock, seconds with fractions)
sub clock
{
	return sql('SELECT extract(epoch FROM clock_timestamp())');
}

# one zk_queue_metrics row of $q, the columns named, joined by |
sub metrics
{
	my ($q, $cols) = @_;
	return sql("SELECT $cols FROM zk_queue_metrics WHERE queue = '$q'");
}

# ---- 1. every column of a queue ----
my $MQ = sql("SELECT zk_path('queue', 'mq')");
sql("SELECT zk_queue_set_policy('mq', 2, 'mq.dlq')");
my $t1a = clock();
sql("SELECT zk_enqueue('mq', ARRAY['a1', 'a2', 'a3', 'a4'])");
my $t1b = clock();
usleep(1_500_000);
my $t2a = clock();
sql("SELECT zk_enqueue('mq', ARRAY['b1', 'b2', 'b3', 'b4', 'b5'])");
my $t2b = clock();
sql("SELECT zk_enqueue('mq', ARRAY['d1', 'd2'], delay => '1 hour')");
ok(scalar(zk_wait_count($zk, "$MQ/delayed", 2, 30)), 'mq: two delayed items');

my $S1 = new_session($node, name => 'S1');
my $tca = clock();
$S1->query_safe('BEGIN');
is($S1->query_safe("SELECT string_agg(body, ',') FROM zk_dequeue('mq', '10s', 3)"), 'a1,a2,a3',
	'S1 claims the oldest three');
my $tcb = clock();

is(metrics('mq', q{ready || '|' || delayed || '|' || claimed || '|' || dead_letter || '|' ||
	max_attempts || '|' || dead_letters}),
	'6|2|3|mq.dlq|2|0', 'mq: ready 6, delayed 2, claimed 3, the policy, no dead letter');
is(sql(q{SELECT items || '|' || claimed || '|' || delayed || '|' || dead_letter || '|' || max_attempts
	FROM zk_queues WHERE queue = 'mq'}), '6|3|2|mq.dlq|2', 'zk_queues: the same counts and policy');

# the ages, against the times around the COMMIT and the dequeue
my ($ra, $ca, $now) = split /\|/, metrics('mq',
	q{extract(epoch FROM oldest_ready_age) || '|' || extract(epoch FROM oldest_claim_age) || '|' ||
	  extract(epoch FROM now())});
note "oldest ready age $ra, oldest claim age $ca";
ok($ra >= $now - $t1b - 0.1 && $ra <= $now - $t1a + 0.1,
	sprintf('mq: the oldest ready item is a4, of the first COMMIT (%.3f in [%.3f, %.3f])',
		$ra, $now - $t1b, $now - $t1a));
ok($ra > $now - $t2a + 0.5, 'mq: older than the second five');
ok($ca >= $now - $tcb - 0.1 && $ca <= $now - $tca + 0.1,
	sprintf('mq: the oldest claim is S1\'s (%.3f in [%.3f, %.3f])', $ca, $now - $tcb, $now - $tca));

usleep(2_000_000);
my ($ra2, $now2) = split /\|/, metrics('mq',
	q{extract(epoch FROM oldest_ready_age) || '|' || extract(epoch FROM now())});
ok($ra2 >= 2, "mq: 2 s later the oldest ready age is at least 2 s ($ra2)");
ok(abs(($ra2 - $ra) - ($now2 - $now)) < 0.1, 'mq: and grew by the time passed (same item)');

# a second consumer claims a4 within the TTL: the age is b1's
my $S2 = new_session($node, name => 'S2');
$S2->query_safe('BEGIN');
my $tda = clock();
is($S2->query_safe("SELECT body FROM zk_dequeue('mq', '10s')"), 'a4', 'S2 claims a4');
my $tdb = clock();
my ($ra3, $now3) = split /\|/, metrics('mq',
	q{extract(epoch FROM oldest_ready_age) || '|' || extract(epoch FROM now())});
ok($ra3 >= $now3 - $t2b - 0.1 && $ra3 <= $now3 - $t2a + 0.1,
	sprintf('mq: a claimed item is not the oldest ready one: b1\'s age, of the second COMMIT (%.3f in [%.3f, %.3f])',
		$ra3, $now3 - $t2b, $now3 - $t2a));
is(metrics('mq', q{ready || '|' || claimed}), '5|4', 'mq: ready 5, claimed 4');

# the oldest claim is still S1's (the one cached), until S1 commits: then S2's
my ($ca2, $nowc2) = split /\|/, metrics('mq',
	q{extract(epoch FROM oldest_claim_age) || '|' || extract(epoch FROM now())});
ok($ca2 >= $nowc2 - $tcb - 0.1 && $ca2 <= $nowc2 - $tca + 0.1,
	sprintf('mq: with S2\'s claim, the oldest claim is still S1\'s (%.3f in [%.3f, %.3f])',
		$ca2, $nowc2 - $tcb, $nowc2 - $tca));

# counters: S1 commits (3 consumed), S2 rolls back (1 released)
$S1->query_safe('COMMIT');
# (counted through ZooKeeper: the next read is the first to find them gone)
ok(scalar(zk_wait_count($zk, "$MQ/taken", 1, 30)), 'mq: S1\'s claims consumed');
my ($ca3, $nowc3) = split /\|/, metrics('mq',
	q{coalesce(extract(epoch FROM oldest_claim_age), -1) || '|' || extract(epoch FROM now())});
ok($ca3 >= $nowc3 - $tdb - 0.1 && $ca3 <= $nowc3 - $tda + 0.1,
	sprintf('mq: S1\'s claims gone, the oldest claim is S2\'s (%.3f in [%.3f, %.3f])',
		$ca3, $nowc3 - $tdb, $nowc3 - $tda));
$S2->query_safe('ROLLBACK');
ok(wait_until(sub { metrics('mq', q{consumed || '|' || released}) eq '3|1' }, 30),
	'mq: consumed 3, released 1');
is(metrics('mq', q{handed_out || '|' || dead_lettered || '|' || (since IS NOT NULL)}), '4|0|true',
	'mq: handed out 4, dead-lettered 0, counting since the first');
ok(wait_until(sub { metrics('mq', q{claimed || '|' || ready || '|' || (oldest_claim_age IS NULL)}) eq '0|6|true' }, 30),
	'mq: no claim: claimed 0, ready 6, no claim age');
my ($ra4, $now4) = split /\|/, metrics('mq',
	q{extract(epoch FROM oldest_ready_age) || '|' || extract(epoch FROM now())});
ok($ra4 >= $now4 - $t1b - 0.1 && $ra4 <= $now4 - $t1a + 0.1, 'mq: a4 is back: still of the first COMMIT');

# ---- 2. dead letters ----
sql("SELECT zk_queue_set_policy('pq', 1, 'pq.dlq')");
sql("SELECT zk_enqueue('pq', 'poison')");
$S1->query_safe('BEGIN');
is($S1->query_safe("SELECT body FROM zk_dequeue('pq', '10s')"), 'poison', 'pq: handed out once');
$S1->query_safe('ROLLBACK');
ok(wait_until(sub { metrics('pq', 'claimed') eq '0' }, 30), 'pq: released');
$S1->query_safe('BEGIN');
is($S1->query_safe("SELECT count(*) FROM zk_try_dequeue('pq')"), '0', 'pq: the next claim moves it');
$S1->query_safe('COMMIT');
ok(wait_until(sub { metrics('pq', q{ready || '|' || dead_letters || '|' || dead_lettered}) eq '0|1|1' }, 30),
	'pq: ready 0, one dead letter, dead-lettered 1');
is(metrics('pq.dlq', q{ready || '|' || (dead_letter IS NULL) || '|' || (dead_letters IS NULL) || '|' ||
	(oldest_ready_age IS NOT NULL)}), '1|true|true|true', 'pq.dlq: its one item, no policy of its own');
is(metrics('pq', q{handed_out || '|' || released || '|' || consumed}), '1|1|0', 'pq: handed out 1, released 1');

# ---- 3. the cost: a big queue is listed once per TTL ----
my $BIG = sql("SELECT zk_path('queue', 'big')");
for my $i (0 .. 2)
{
	sql("SELECT zk_enqueue('big', array_agg('i' || g)) FROM generate_series($i * 1000 + 1, $i * 1000 + 1000) g");
}
is(metrics('big', 'ready'), '3000', 'big: 3000 items');
my $l0 = listed("$BIG/entries");
my ($b1, $bn1) = split /\|/, metrics('big',
	q{extract(epoch FROM oldest_ready_age) || '|' || extract(epoch FROM now())});
my $l1 = listed("$BIG/entries");
ok($l1 >= 1, "big: listed before ($l1 listings)");
my ($b2, $bn2) = split /\|/, metrics('big',
	q{extract(epoch FROM oldest_ready_age) || '|' || extract(epoch FROM now())});
is(listed("$BIG/entries"), $l1, 'big: a second read within the TTL lists nothing');
ok(defined $b2 && $b2 ne '' && abs(($b2 - $b1) - ($bn2 - $bn1)) < 0.1,
	"big: and gives the same item's age ($b1, then $b2)");
usleep(10_500_000);
metrics('big', 'ready');
is(listed("$BIG/entries"), $l1 + 1, 'big: once the TTL is past, one listing');

# more items than zklock.max_children: never listed; the cached items
$node->append_conf('postgresql.conf', "zklock.max_children = 2000\n");
$node->reload;
ok(wait_until(sub { sql('SHOW zklock.max_children') eq '2000' }, 10), 'zklock.max_children = 2000');
usleep(11_000_000);    # past the TTL again
my $l2 = listed("$BIG/entries");
my $b3 = metrics('big', q{ready || '|' || (oldest_ready_age > '10 s')});
is($b3, '3000|true', 'big: past zklock.max_children, the age of the item cached');
is(listed("$BIG/entries"), $l2, 'big: and no listing');
$node->append_conf('postgresql.conf', "zklock.max_children = 10000\n");
$node->reload;

# 40 claims: read 32 at a time, the oldest one's age
my $S3 = new_session($node, name => 'S3');
$S3->query_safe('BEGIN');
my $tea = clock();
is($S3->query_safe("SELECT count(*) FROM zk_dequeue('big', '10s', 40)"), '40', 'S3 claims 40 items of big');
my $teb = clock();
my ($bc, $bcn, $bcnow) = split /\|/, metrics('big',
	q{claimed || '|' || extract(epoch FROM oldest_claim_age) || '|' || extract(epoch FROM now())});
is($bc, '40', 'big: claimed 40');
ok($bcn >= $bcnow - $teb - 0.1 && $bcn <= $bcnow - $tea + 0.1,
	sprintf('big: the oldest of 40 claims read (%.3f in [%.3f, %.3f])', $bcn, $bcnow - $teb, $bcnow - $tea));
$S3->query_safe('ROLLBACK');
$S3->quit;

$S1->quit;
$S2->quit;
done_testing();
