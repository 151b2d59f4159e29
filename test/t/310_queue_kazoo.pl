
# 310_queue_kazoo.pl - the queue shared with kazoo's LockingQueue on the path
# /zklock/queues/<name> (driven by test/queue_kazoo.py), both ways.
#
# kazoo's items, put with several priorities (put and put_all), are
# dequeued by SQL in priority then FIFO order with their exact bytes, and
# msg_id = 2^62 + czxid * 1024 + the entry's sequence number.  A kazoo
# put_all of 1,500 items (one multi, one czxid) gives 1,500 distinct msg_ids.
# SQL's items are published to a waiting kazoo consumer only at COMMIT, all
# together, and kazoo gets and consumes them in order with their exact
# bytes.  Neither takes an item the other has claimed: while SQL holds a
# claim kazoo gets the next item or nothing, and gets the claimed one once
# SQL rolls back; while kazoo holds a claim (ephemeral, kazoo's id as data)
# SQL gets nothing and a waiting SQL consumer gets it once kazoo releases.
# A SQL consumer waiting on an empty queue, or on one nobody created yet, gets
# the item a kazoo producer puts, or that a kazoo consumer which went away
# had claimed.
# Consumers of both kinds draining one queue at once take every item exactly
# once.  At the end ZooKeeper holds no entry and no claim.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('queue_kazoo', $zk,
	session_timeout => '10s',
	connect_timeout => '3s');

my $Q = '/zklock/queues';

sub hexof { return unpack('H*', $_[0]); }

sub msg_id_of { return zk_msg_id_of($_[0]); }

sub sql { return $node->safe_psql('postgres', $_[0]); }

# children of $path as { name, owner, czxid }, sorted by name; dies when
# ZooKeeper cannot be asked
sub nodes_of { return zk_nodes_of($zk, $_[0]); }

# wait until queue $q has no entry and no claim left
sub drained
{
	my ($q, $secs) = @_;
	return zk_wait_count($zk, "$Q/$q/entries", 0, $secs // 10)
	  && zk_wait_count($zk, "$Q/$q/taken", 0, $secs // 10);
}

my $kz = queue_kazoo($zk);
my $kz2 = queue_kazoo($zk);
my $s1 = new_session($node, name => 's1');
my $s2 = new_session($node, name => 's2');

#
# kazoo puts, SQL dequeues: priority order, FIFO within a priority, exact bytes
#
my $P = "$Q/k2s";
my @put = ([ 'k-a', 100 ], [ 'k-b', 7 ], [ "\x00\xff\x10", 100 ], [ 'k-d', 0 ], [ 'k-e', 7 ]);
is($kz->cmd("put $P $_->[1] " . hexof($_->[0])), 'ok', "kazoo put '" . hexof($_->[0]) . "' priority $_->[1]")
  foreach @put;
is($kz->cmd("putall $P 50 " . join(',', map { hexof($_) } 'k-f', 'k-g')), 'ok',
	'kazoo put_all two items at priority 50');
my @ent = nodes_of("$P/entries");
is(join(' ', map { $_->{name} =~ /^entry-(\d{3})-\d{10}$/ ? $1 : $_->{name} } @ent),
	'000 007 007 050 050 100 100', "kazoo's entries: entry-PPP-<seq>");
is(sql("SELECT zk_queue_length('k2s')"), '7', 'zk_queue_length counts kazoo\'s items');
my @want = ([ 0, 'k-d' ], [ 7, 'k-b' ], [ 7, 'k-e' ], [ 50, 'k-f' ], [ 50, 'k-g' ], [ 100, 'k-a' ],
	[ 100, "\x00\xff\x10" ]);
is(sql("SELECT string_agg(encode(payload, 'hex'), ',') FROM zk_queue_peek('k2s')"),
	join(',', map { hexof($_->[1]) } @want), 'zk_queue_peek shows them in queue order');
$s1->query_safe('BEGIN');
my $out = $s1->query_safe(
	"SELECT msg_id, priority, encode(payload, 'hex'), coalesce(body, '(null)') FROM zk_dequeue('k2s', '5s', 1000)");
my @rows = map { [ split /\|/, $_, -1 ] } split /\n/, $out;
is(scalar(@rows), 7, 'SQL dequeued the seven items at once');
is_deeply([ map { "$_->[1]:$_->[2]" } @rows ], [ map { "$_->[0]:" . hexof($_->[1]) } @want ],
	'lower priority first, FIFO within a priority, exact payload bytes');
is_deeply([ map { $_->[3] } @rows ], [ (map { $_->[1] } @want[ 0 .. 5 ]), '(null)' ],
	'body: the text, NULL for bytes that are not UTF-8');
is_deeply([ map { $_->[0] } @rows ], [ map { msg_id_of($_) } @ent ],
	"msg_id comes from the kazoo entry's czxid and sequence number");
is(zk_count($zk, "$P/taken"), 7, 'seven claims while the transaction is open');
is($kz->cmd("get $P 1", 30), 'none', 'kazoo gets nothing while SQL holds every item');
$s1->query_safe('COMMIT');
ok(drained('k2s'), 'COMMIT consumed them: no entry, no claim');
is($kz->cmd("len $P"), 'len 0', 'kazoo sees an empty queue');

#
# SQL enqueues, kazoo gets and consumes: published to a waiting kazoo
# consumer at COMMIT only, all together
#
$P = "$Q/s2k";
$kz->send("get $P 30");
is($kz->read_line(1), undef, 'kazoo waits on the empty queue');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_enqueue('s2k', 'late', 900)");
$s1->query_safe("SELECT zk_enqueue('s2k', 'héllo')");
$s1->query_safe("SELECT zk_enqueue('s2k', '\\x00ff'::bytea, 3)");
is($kz->read_line(1.5), undef, 'kazoo gets nothing before COMMIT');
$s1->query_safe('COMMIT');
is($kz->read_line(10), 'item 00ff',
	'after COMMIT kazoo gets the priority-3 item first (all three were published together)');
my ($held) = nodes_of("$P/taken");
my $kid = $kz->cmd("id $P") // '';
ok(defined $held && $held->{owner} ne '0x0', "kazoo's claim is ephemeral (" . ($held->{owner} // 'none') . ')');
is('id ' . hexof(zk_get($zk, "$P/taken/" . ($held->{name} // 'x')) // ''), $kid,
	"kazoo's claim holds kazoo's id");
is(sql("SELECT zk_queue_length('s2k')"), '2', 'SQL counts two unclaimed items');
is($kz->cmd("consume $P"), 'true', 'kazoo consumes it');
is($kz->cmd("get $P 5"), 'item ' . hexof('héllo'), "kazoo gets 'héllo' as UTF-8");
is($kz->cmd("consume $P"), 'true', 'and consumes it');
is($kz->cmd("get $P 5"), 'item ' . hexof('late'), "then 'late' (priority 900)");
is($kz->cmd("consume $P"), 'true', 'and consumes it');
ok(drained('s2k'), 'no entry, no claim left');

#
# SQL holds a claim: kazoo gets the next item, or nothing, until SQL rolls back
#
$P = "$Q/shared";
sql("SELECT zk_enqueue('shared', 'A')");
sql("SELECT zk_enqueue('shared', 'B')");
$s1->query_safe('BEGIN');
my ($ma, $ba) = split /\|/, $s1->query_safe("SELECT msg_id, body FROM zk_try_dequeue('shared')");
is($ba, 'A', 'SQL claims A');
my ($sqlclaim) = nodes_of("$P/taken");
is($sqlclaim->{owner} // '', '0x0', "SQL's claim is persistent");
is($kz->cmd("get $P 5"), 'item ' . hexof('B'), 'kazoo gets B, not the claimed A');
is($kz->cmd("consume $P"), 'true', 'kazoo consumes B');
is($kz->cmd("get $P 1", 30), 'none', 'kazoo gets nothing while SQL holds A');
is(zk_count($zk, "$P/taken"), 1, "kazoo's attempt left SQL's claim alone, and no claim of its own");
$kz->send("get $P 30");
is($kz->read_line(1), undef, 'a kazoo consumer waits');
$s1->query_safe('ROLLBACK');
is($kz->read_line(10), 'item ' . hexof('A'), 'SQL rolled back: kazoo gets A');
is($kz->cmd("node $P"), "node $sqlclaim->{name}", 'the same entry');

#
# kazoo holds a claim: SQL gets nothing until kazoo releases
#
is(sql("SELECT count(*) FROM zk_try_dequeue('shared')"), '0', 'zk_try_dequeue gets nothing while kazoo holds A');
my $r = $s2->query("SELECT count(*) FROM zk_dequeue('shared', '1s')", 30);
is($r->{out}, '0', 'zk_dequeue with timeout 1s gets nothing');
is(sql("SELECT zk_queue_length('shared')"), '0', 'zk_queue_length: no unclaimed item');
is(sql("SELECT items, claimed, local_claims FROM zk_queues WHERE queue = 'shared'"), '0|1|0',
	"zk_queues: kazoo's claim counts, but not as a local claim");
is(sql("SELECT zk_queue_purge('shared')"), '0', "zk_queue_purge leaves kazoo's claimed item");
is(sql("SELECT zk_queue_release_cluster('1234567890123456789')"), '0',
	"zk_queue_release_cluster of another cluster leaves kazoo's claim alone");
is(zk_count($zk, "$P/entries") . '/' . zk_count($zk, "$P/taken"), '1/1', 'the entry and its claim are still there');
$s2->send("SELECT msg_id, body FROM zk_dequeue('shared', '30s')");
sleep 1;
ok($s2->running, 'a SQL consumer waits');
is($kz->cmd("holds $P"), 'true', 'kazoo still holds A');
my $t0 = time();
is($kz->cmd("release $P"), 'true', 'kazoo releases A');
$r = $s2->wait(10);
is($r->{out}, "$ma|A", 'the waiting SQL consumer gets A, same msg_id') or diag $r->{err};
ok($r->{done} && time() - $t0 < 5, sprintf('%.2fs after the release', time() - $t0));
ok(drained('shared'), 'consumed: no entry, no claim');

#
# A waiting SQL consumer is woken by kazoo's producer: on an empty queue, and
# on a queue nobody has created yet
#
foreach my $case ([ 'shared', 'empty queue' ], [ 'fresh', 'queue not created yet' ])
{
	my ($q, $what) = @$case;
	is(zk_count($zk, "$Q/$q/entries"), 0, "$what: no entry");
	$s2->send("SELECT body FROM zk_dequeue('$q', '30s')");
	sleep 1;
	ok($s2->running, "$what: a SQL consumer waits");
	$t0 = time();
	is($kz->cmd("put $Q/$q 100 " . hexof("for $q")), 'ok', "$what: kazoo puts an item");
	$r = $s2->wait(10);
	is($r->{out}, "for $q", "$what: the waiting SQL consumer gets it") or diag $r->{err};
	ok($r->{done} && time() - $t0 < 5, sprintf('%s: %.2fs after the put', $what, time() - $t0));
	$s2->wait(40) unless $r->{done};
	ok(drained($q), "$what: consumed");
}

#
# A kazoo consumer that goes away: its ephemeral claim goes with its session,
# and a waiting SQL consumer gets the item
#
$P = "$Q/gone";
my $kz3 = queue_kazoo($zk);
is($kz3->cmd("put $P 100 " . hexof('orphan')), 'ok', 'kazoo puts an item');
is($kz3->cmd("get $P 5"), 'item ' . hexof('orphan'), 'and claims it');
$s2->send("SELECT body FROM zk_dequeue('gone', '30s')");
sleep 1;
ok($s2->running, 'a SQL consumer waits');
$t0 = time();
$kz3->quit;
$r = $s2->wait(15);
is($r->{out}, 'orphan', "kazoo's session closed: the SQL consumer gets the item") or diag $r->{err};
ok($r->{done} && time() - $t0 < 10, sprintf('%.2fs after kazoo quit', time() - $t0));
$s2->wait(30) unless $r->{done};
ok(drained('gone'), 'consumed');

#
# Consumers of both kinds drain one queue together: each item exactly once
#
$P = "$Q/mix";
my @mix = map { sprintf('m%02d', $_) } 1 .. 40;
is($kz->cmd("putall $P 100 " . join(',', map { hexof($_) } @mix[ 0 .. 19 ])), 'ok', 'kazoo puts 20 items');
sql("BEGIN; SELECT zk_enqueue('mix', 'm' || lpad(i::text, 2, '0')) FROM generate_series(21, 40) i; COMMIT");
is(sql("SELECT zk_queue_length('mix')"), '40', '40 items');
$kz2->send("drain $P 2");
my $sqlgot = sql(join("\n", map { "BEGIN; SELECT body FROM zk_try_dequeue('mix'); COMMIT;" } 1 .. 40));
my $kline = $kz2->read_line(60) // '';
ok($kline =~ /^drained /, 'the kazoo consumer finished') or diag $kline;
my @kgot = map { pack('H*', $_) } grep { $_ ne '' } split /,/, substr($kline, 8);
# whatever either left (a consumer may give up while the other holds the rest)
my $rest = sql("SELECT body FROM zk_try_dequeue('mix', 1000)");
my @all = sort(@kgot, (grep { $_ ne '' } split /\n/, $sqlgot), (grep { $_ ne '' } split /\n/, $rest));
is_deeply(\@all, \@mix, sprintf('every item taken exactly once (kazoo %d, SQL %d, left over %d)',
	scalar(@kgot), scalar(grep { $_ ne '' } split /\n/, $sqlgot), scalar(grep { $_ ne '' } split /\n/, $rest)));
ok(drained('mix'), 'no entry, no claim left');

#
# The worker lists taken only when its last listing showed claims of others
# or an attempt lost a race: a kazoo claim made after that listing, and its
# release, must still be seen.  In queue order every time.
#
$P = "$Q/late";
sql("SELECT zk_enqueue('late', 'l' || i) FROM generate_series(0, 4) i");
is(sql("SELECT body FROM zk_try_dequeue('late')"), 'l0', 'late: SQL takes l0 (taken was empty)');
is($kz->cmd("get $P 5"), 'item ' . hexof('l1'), 'late: then kazoo claims l1');
is(sql("SELECT body FROM zk_try_dequeue('late')"), 'l2',
	'late: SQL, whose last listing of taken was empty, loses the race on l1 and takes l2');
sql("SELECT zk_enqueue('late', 'l5', 1)");
is($kz->cmd("release $P"), 'true', 'late: kazoo releases l1');
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('late', 10)"), 'l5,l1,l3,l4',
	'late: the released l1 comes back in its place, after the new priority-1 item');
ok(drained('late'), 'late: no entry, no claim left');

# A rollback here hands its item to a waiter here at once (no taken watch)
sql("SELECT zk_enqueue('late', 'r1')");
$s1->query_safe('BEGIN');
is($s1->query_safe("SELECT body FROM zk_dequeue('late', '2s')"), 'r1', 'late: one session claims r1');
$s2->send("SELECT body FROM zk_dequeue('late', '20s')");
sleep(0.3);
ok($s2->running, 'late: another session waits');
my $t1 = time();
$s1->query_safe('ROLLBACK');
my $got = $s2->wait(30);
is($got->{out}, 'r1', 'late: the waiting session gets r1 after the rollback');
ok(time() - $t1 < 5, 'late: at once, not after its timeout (' . sprintf('%.2f s', time() - $t1) . ')');
ok(drained('late'), 'late: consumed');

#
# msg_id within one kazoo put_all of more than 1,024 items: one multi, so
# one czxid for all; every dequeued msg_id is distinct, is the one the
# entry's czxid and sequence number give, and grows in queue order
#
$P = "$Q/bulk";
my $NBULK = 1500;
is($kz->cmd("putall $P 100 " . join(',', map { hexof("b$_") } 1 .. $NBULK), 60), 'ok',
	"bulk: kazoo put_all of $NBULK items in one transaction");
my @bent = nodes_of("$P/entries");
is(scalar(@bent), $NBULK, "bulk: $NBULK entries");
is(scalar(keys %{ { map { $_->{czxid} => 1 } @bent } }), 1, 'bulk: all share one czxid');
my @bids;
foreach my $round (1 .. 2)
{
	push @bids, split /\n/, sql("SELECT msg_id FROM zk_try_dequeue('bulk', 1000)");
}
is(scalar(@bids), $NBULK, "bulk: SQL dequeued the $NBULK items (1000 + 500)");
is(scalar(keys %{ { map { $_ => 1 } @bids } }), $NBULK, "bulk: $NBULK distinct msg_ids")
  or do { my %c; $c{$_}++ foreach @bids; diag 'repeated: ' . join(' ', grep { $c{$_} > 1 } sort keys %c); };
is_deeply(\@bids, [ map { msg_id_of($_) } @bent ], 'bulk: each msg_id is 2^62 + czxid * 1024 + its sequence number');
is(scalar(grep { $bids[$_] <= $bids[ $_ - 1 ] } 1 .. $#bids), 0, 'bulk: msg_id grows in queue order');
ok(drained('bulk'), 'bulk: consumed');

#
# At the end: nothing left anywhere under the queues
#
foreach my $q (qw(k2s s2k shared fresh gone mix late bulk))
{
	is(zk_count($zk, "$Q/$q/entries") . '/' . zk_count($zk, "$Q/$q/taken"), '0/0', "$q: no entry, no claim");
}

$kz->quit;
$kz2->quit;
$s1->quit;
$s2->quit;
$node->stop;
done_testing();
