
# 360_queue_groups.pl - message groups: zk_enqueue_grouped(queue, group,
# payload(s), priority).
#
# Within a group, items go out in publication order (within a transaction,
# call order), whatever their priorities, one at a time: the next item of a
# group enters the queue's entries only once the one before is consumed
# (committed), and a rolled-back hand-out leaves the item at the head
# (handed out again, attempts + 1).  A zk_retry_later hold keeps the group
# blocked until it ends.  Items of other groups and ungrouped items flow
# meanwhile.  kazoo's LockingQueue on the same path sees at most one item of
# a group at a time (entries counted through ZooKeeper) and its consume
# lets the next one in.  Group keys are compared as bytes: keys that an
# encoding could mix up ('a/b', 'a%2Fb', 'a~b') are different groups; 1 to
# 64 bytes, else 22023 and nothing enqueued.
#
# The load (test/queue_groups_run.py): two clusters on one ZooKeeper, one
# producer (on A or B per transaction) of 6 groups x 25 items and 40
# ungrouped ones, 8 consumers (4 per cluster) that roll back 25 % of their
# hand-outs, each hand-out recorded with the server's clock after
# zk_dequeue returned and before COMMIT/ROLLBACK; meanwhile A's zklock
# worker is terminated (pg_terminate_backend), ZooKeeper killed and
# restarted, and B's worker SIGKILLed (B crash-restarts).  The checker
# proves: every item consumed exactly once, each group's committed
# sequence 1..N in time order, every hand-out of a group the head (one more
# than its group's committed ones), no two hand-outs of a group overlapping
# in time, different groups overlapping (parallelism); a sampler listing
# entries through kazoo never saw two items of a group at once.  Run on
# mutated data the checker must report each anomaly.  At the end nothing
# is left in ZooKeeper: no entry, claim, grp- or gst- node.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $RUN = "$ZkLockTest::SRC/test/queue_groups_run.py";
# the clients talk UTF-8: the group keys below are UTF-8 bytes (this file
# stays ASCII)
$ENV{PGCLIENTENCODING} = 'UTF8';

my $zk = zk_start();
# PostgreSQL::Test::Cluster turns restart_after_crash off: the faults need it
my %opts = (session_timeout => '10s', connect_timeout => '3s',
	conf => "restart_after_crash = on\nlog_statement = none\n");
my $A = zk_node('groups_a', $zk, %opts);
my $B = zk_node('groups_b', $zk, %opts);

sub qpath { return "/zklock/queues/$_[0]"; }

sub state_of
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ], on_error_stop => 1);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
}

# children of $path through ZooKeeper (none when it does not exist); dies
# when ZooKeeper cannot be asked
sub kids
{
	my ($path) = @_;
	return grep { $_ ne '' } split /\n/, zkq_or_die($zk, 'ls', $path);
}

# the group's waiting items and state nodes under <queue>/delayed
sub group_nodes
{
	my ($q) = @_;
	return grep { /^(grp|gst)-/ } kids(qpath($q) . '/delayed');
}

# nothing of queue $q left in ZooKeeper: no entry, no claim, no grp- or gst-
# node (a gst- node may take a moment to go)
sub nothing_left
{
	my ($q, $what) = @_;
	my $left;
	my $ok = wait_until(
		sub {
			my @e = kids(qpath($q) . '/entries');
			my @t = kids(qpath($q) . '/taken');
			my @g = group_nodes($q);
			$left = "entries [@e] taken [@t] delayed [@g]";
			return !@e && !@t && !@g;
		},
		90, 0.5);
	ok($ok, "$what: nothing left of queue $q in ZooKeeper (no entry, claim, grp- or gst- node)")
	  or diag "left: $left\n" . zk_tree($zk, qpath($q));
	return $ok;
}

# one item from $q on $node (its own transaction, committed): "body|attempts"
sub take
{
	my ($node, $q, $wait) = @_;
	return $node->safe_psql('postgres',
		"SELECT body || '|' || attempts FROM zk_dequeue('$q', '" . ($wait // '20s') . "')");
}

#
# 1. Bad input changes nothing
#
my $k64 = 'k' x 64;
my $k65 = 'k' x 65;
my $e32 = "\xc3\xa9" x 32;    # 32 characters, 64 bytes in UTF-8
my $e33 = "\xc3\xa9" x 33;    # 33 characters, 66 bytes
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', '', 'x')"), '22023', 'an empty group key: 22023');
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', '$k65', 'x')"), '22023', 'a 65-byte group key: 22023');
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', '$e33', 'x')"), '22023',
	'a group key of 33 two-byte characters (66 bytes): 22023');
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', '$k65', '\\x00ff'::bytea)"), '22023',
	'a 65-byte group key, bytea payload: 22023');
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', '$k65', ARRAY['x', 'y'])"), '22023',
	'a 65-byte group key, array form: 22023');
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', '', ARRAY['x']::bytea[])"), '22023',
	'an empty group key, bytea array: 22023');
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', NULL::text, 'x')"), '22004', 'a NULL group key: 22004');
is(state_of($A, "SELECT zk_enqueue_grouped('gbad', 'g', 'x', 1000)"), '22003', 'a priority out of range: 22003');
is(state_of($A, qq{
	BEGIN;
	SELECT zk_enqueue_grouped('gbad', 'fine', 'kept?');
	SELECT zk_enqueue_grouped('gbad', '$k65', 'x');
	COMMIT;}), '22023', 'a bad key after a good call fails the transaction');
sleep 1;
ok(!zk_exists($zk, qpath('gbad')) || zk_count($zk, qpath('gbad')) == 0,
	'nothing of the bad calls (nor of their failed transaction) reached ZooKeeper')
  or diag zk_tree($zk, qpath('gbad'));
is($B->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('gbad', 10)"), '0', 'and nothing is handed out');

# the limits themselves are fine: 64 bytes, ASCII or not
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('glim', '$k64', 'k64'); "
	  . "SELECT zk_enqueue_grouped('glim', '$e32', 'e32')");
is($B->safe_psql('postgres', "SELECT string_agg(body, ',' ORDER BY body) FROM zk_dequeue('glim', '20s', 10)"),
	'e32,k64', '64-byte keys (ASCII, and 32 two-byte characters) are taken; their items go out');
nothing_left('glim', '64-byte keys');

#
# 2. A rollback keeps the head; publication order beats priority
#
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gr', 'g', ARRAY['g:1', 'g:2'])");
ok(wait_until(sub { scalar(kids(qpath('gr') . '/entries')) + scalar(group_nodes('gr')) >= 2 }, 30),
	'both items are published');
my $a1 = new_session($A, name => 'a1');
$a1->query_safe('BEGIN');
is($a1->query_safe("SELECT body || '|' || attempts FROM zk_dequeue('gr', '20s')"), 'g:1|1',
	'A takes g:1 (attempts 1)');
is($B->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('gr', '2s', 10)"), '0',
	'B gets nothing while g:1 is out: g:2 waits behind it');
my @entries = kids(qpath('gr') . '/entries');
is(scalar(@entries), 1, 'one item of the group in entries (ZooKeeper)');
like($entries[0] // '', qr/^entry-\d{3}-\d{10}g\d{10}$/, "the promoted item's name: entry-PPP-<10>g<10> ($entries[0])");
my @gn = group_nodes('gr');
is(scalar(grep { /^grp-/ } @gn), 1, 'g:2 waits under delayed as a grp- node') or diag "@gn";
is(scalar(grep { /^gst-/ } @gn), 1, "the group's state node gst- is there") or diag "@gn";
$a1->query_safe('ROLLBACK');
is(take($B, 'gr'), 'g:1|2', 'after the ROLLBACK the next dequeue (B) returns g:1 again, attempts 2');
is(take($A, 'gr'), 'g:2|1', 'then g:2 (attempts 1)');
nothing_left('gr', 'rollback keeps the head');

# publication order, not priority, within a group; other groups by priority
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gp', 'p', 'p:1', 500)");
$B->safe_psql('postgres', "SELECT zk_enqueue_grouped('gp', 'p', 'p:2', 10)");
$A->safe_psql('postgres', "BEGIN; SELECT zk_enqueue_grouped('gp', 'p', 'p:3', 900); "
	  . "SELECT zk_enqueue_grouped('gp', 'p', ARRAY['p:4', 'p:5']::bytea[], 0); COMMIT;");
my @order;
foreach my $i (1 .. 5)
{
	my $b = $B->safe_psql('postgres', "SELECT convert_from(payload, 'UTF8') FROM zk_dequeue('gp', '20s')");
	push @order, $b;
}
is(join(',', @order), 'p:1,p:2,p:3,p:4,p:5',
	'a group goes out in publication order (across clusters and transactions, call order within one), '
	  . 'whatever the priorities');
nothing_left('gp', 'publication order');

# a transaction rolled back publishes nothing of a group
$A->safe_psql('postgres', "BEGIN; SELECT zk_enqueue_grouped('gp', 'p', 'never'); ROLLBACK;");
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gp', 'p', 'after')");
is($B->safe_psql('postgres', "SELECT string_agg(body, ',') FROM zk_dequeue('gp', '20s', 10)"), 'after',
	'a rolled-back grouped enqueue publishes nothing');
nothing_left('gp', 'rolled-back enqueue');

#
# 3. Group keys are bytes: no two keys share a group
#
my @odd = ('a/b', 'a%2Fb', 'a%2fb', 'a~b', 'a b', 'A/B', '..', 'x' x 63 . '~');
$A->safe_psql('postgres', join(';', map {
	my $k = $_;
	"SELECT zk_enqueue_grouped('godd', '$k', ARRAY['$k|1', '$k|2'])" } @odd));
# one transaction takes every head it can get and keeps them: were two keys
# one group, the second key's first item would wait behind the first key's
my $so = new_session($B, name => 'so');
$so->query_safe('BEGIN');
my @heads;
wait_until(
	sub {
		push @heads, grep { $_ ne '' } split /\n/,
		  $so->query_safe("SELECT body FROM zk_dequeue('godd', '1s', 100)");
		return @heads >= @odd;
	},
	30, 0);
is(join(',', sort @heads), join(',', sort map { "$_|1" } @odd),
	"keys an encoding could confuse ('a/b', 'a%2Fb', 'a~b'...) are different groups: all their heads are out at once")
  or diag zk_tree($zk, qpath('godd'));
$so->query_safe('COMMIT');
my @seconds;
wait_until(
	sub {
		push @seconds, grep { $_ ne '' } split /\n/,
		  $B->safe_psql('postgres', "SELECT body FROM zk_dequeue('godd', '1s', 100)");
		return @seconds >= @odd;
	},
	30, 0);
is(join(',', sort @seconds), join(',', sort map { "$_|2" } @odd), "then each group's second item");
$so->quit;
nothing_left('godd', 'odd keys');

#
# 4. Ungrouped items flow while a group is blocked; a hold blocks its group
#
# (a group's first item enters the queue once a server serving it moves it
# there, after COMMIT: items enqueued ungrouped meanwhile may go out first,
# so these come after)
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gu', 'h', ARRAY['h:1', 'h:2'], 10)");
my $s1 = new_session($A, name => 's1');
$s1->query_safe('BEGIN');
is($s1->query_safe("SELECT body FROM zk_dequeue('gu', '20s')"), 'h:1', 'A holds the head of group h');
$A->safe_psql('postgres', "SELECT zk_enqueue('gu', ARRAY['u:1', 'u:2', 'u:3'])");
my @u;
wait_until(
	sub {
		push @u, grep { $_ ne '' } split /\n/,
		  $B->safe_psql('postgres', "SELECT body FROM zk_dequeue('gu', '2s', 10)");
		return @u >= 3;
	},
	30);
is(join(',', sort @u), 'u:1,u:2,u:3', 'B dequeues every ungrouped item meanwhile, and not h:2');
$s1->query_safe('COMMIT');
is(take($B, 'gu'), 'h:2|1', "once h:1 is consumed, h:2 goes out");
nothing_left('gu', 'ungrouped items flow');

# zk_retry_later: the group stays blocked until the hold ends
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gh', 'r', ARRAY['r:1', 'r:2'])");
my $t0 = time;
my $held = $A->safe_psql('postgres', q{
	BEGIN;
	CREATE TEMP TABLE got ON COMMIT DROP AS SELECT * FROM zk_dequeue('gh', '20s');
	SELECT zk_retry_later(msg_id, '4 seconds') FROM got;
	SELECT body || '|' || attempts FROM got;
	ROLLBACK;});
is((grep { $_ ne '' } split /\n/, $held)[-1], 'r:1|1', 'A takes r:1 and holds it back for 4 s');
is($B->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('gh', '2s', 10)"), '0',
	'during the hold nothing of the group goes out (r:2 neither)');
my $got = take($B, 'gh', '30s');
my $waited = time - $t0;
is($got, 'r:1|2', 'after the hold r:1 comes back first, attempts 2');
cmp_ok($waited, '>=', 3.5, sprintf('not before the hold ended (%.1f s)', $waited));
is(take($A, 'gh'), 'r:2|1', 'then r:2');
nothing_left('gh', 'hold');

# a queue with grouped items waiting is not dropped; a purge deletes a
# group's item in the queue, and the next one comes in
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gdrop', 'd', ARRAY['d:1', 'd:2', 'd:3'])");
ok(wait_until(sub { scalar(grep { /^grp-/ } group_nodes('gdrop')) >= 2 }, 30), 'gdrop: items of group d wait');
is(state_of($A, "SELECT zk_queue_drop('gdrop')"), '55006', 'a queue with grouped items waiting is not dropped');
is(take($B, 'gdrop'), 'd:1|1', 'd:1 goes out');
ok(wait_until(sub { scalar(kids(qpath('gdrop') . '/entries')) == 1 }, 30), 'd:2 comes into the queue');
is($A->safe_psql('postgres', "SELECT zk_queue_purge('gdrop')"), '1', 'a purge deletes the one item of the group in the queue');
is(take($B, 'gdrop'), 'd:3|1', 'then d:3 comes in and goes out (d:2 was purged)');
nothing_left('gdrop', 'drop and purge');

#
# 5. kazoo's LockingQueue on the same queue
#
my $KQ = qpath('gk');
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gk', 'k', ARRAY['k:1', 'k:2', 'k:3'])");
# B hands k:1 out once and rolls back: it serves the queue from then on
my $b1 = new_session($B, name => 'b1');
$b1->query_safe('BEGIN');
is($b1->query_safe("SELECT body FROM zk_dequeue('gk', '20s')"), 'k:1', 'B takes k:1');
$b1->query_safe('ROLLBACK');
my $kz = queue_kazoo($zk);
ok(wait_until(sub { scalar(kids("$KQ/entries")) == 1 }, 30), 'one item of the group in entries');
my $max_seen = 0;
my @kgot;
foreach my $i (1 .. 3)
{
	my @e = kids("$KQ/entries");
	$max_seen = @e if @e > $max_seen;
	my $r = $kz->cmd("get $KQ 20");
	push @kgot, $r;
	@e = kids("$KQ/entries");
	$max_seen = @e if @e > $max_seen;
	# zklock gets nothing while kazoo holds the group's item; B's try also
	# keeps B serving the queue (a server serving no consumer of the queue
	# for 10 to 20 s forgets it, and with it the groups: see doc/queues.md)
	is($B->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('gk', 10)"), '0',
		"zklock gets nothing of the group while kazoo holds item $i");
	if ($i == 2)
	{
		# released, not consumed: it stays the head
		is($kz->cmd("release $KQ"), 'true', 'kazoo releases k:2');
		sleep 1;
		is(scalar(kids("$KQ/entries")), 1, 'still one item of the group in entries');
		is($kz->cmd("get $KQ 20"), 'item ' . unpack('H*', 'k:2'), 'kazoo gets k:2 again');
		is($B->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('gk', 10)"), '0',
			'zklock gets nothing while kazoo holds k:2 again');
	}
	is($kz->cmd("consume $KQ"), 'true', "kazoo consumes item $i");
	# the next one comes in (none after the last)
	ok(wait_until(sub { my @n = kids("$KQ/entries"); $max_seen = @n if @n > $max_seen; @n == ($i < 3 ? 1 : 0) }, 30),
		"entries holds " . ($i < 3 ? 'the next item' : 'nothing') . " after kazoo's consume");
}
is(join(',', @kgot), join(',', map { 'item ' . unpack('H*', "k:$_") } 1 .. 3),
	'kazoo gets k:1, k:2, k:3 in order');
is($max_seen, 1, 'kazoo never saw two items of the group in entries');
nothing_left('gk', 'kazoo');

# kazoo alone: once no zklock consumer serves the queue any more (B forgets
# it after 10 to 20 s idle), kazoo's consume of the group's item still lets
# the next one in (the watch on the item serves the queue again), and the
# last one's consume lets the state node go
my $KQ2 = qpath('gk2');
$A->safe_psql('postgres', "SELECT zk_enqueue_grouped('gk2', 'k', ARRAY['k:1', 'k:2', 'k:3'])");
$b1->query_safe('BEGIN');
is($b1->query_safe("SELECT body FROM zk_dequeue('gk2', '20s')"), 'k:1', 'B takes k:1 of gk2 once');
$b1->query_safe('ROLLBACK');
is($kz->cmd("get $KQ2 20"), 'item ' . unpack('H*', 'k:1'), 'kazoo gets k:1 of gk2');
is($kz->cmd("consume $KQ2"), 'true', 'kazoo consumes k:1 of gk2');
ok(wait_until(sub { scalar(kids("$KQ2/entries")) == 1 }, 30), 'k:2 comes in');
# no zklock dequeue on gk2 from now on: B forgets the queue
sleep 35;
is($kz->cmd("get $KQ2 20"), 'item ' . unpack('H*', 'k:2'), 'kazoo gets k:2, nobody serving gk2 in zklock');
is($kz->cmd("consume $KQ2"), 'true', 'kazoo consumes k:2');
is($kz->cmd("get $KQ2 30"), 'item ' . unpack('H*', 'k:3'),
	'k:3 comes in for kazoo alone (the watch on k:2 made B serve the queue again)');
is($kz->cmd("consume $KQ2"), 'true', 'kazoo consumes k:3');
nothing_left('gk2', 'kazoo alone');
$kz->quit;

#
# 6. The load, with faults: order and exclusivity across two clusters
#
my $dir = "$PostgreSQL::Test::Utils::tmp_check/groups";
mkdir $dir;
unlink "$dir/pause", "$dir/paused", "$dir/progress";
foreach my $n ($A, $B)
{
	my ($rc, $out, $err) = py([ $RUN, 'setup', '--host', $n->host, '--port', $n->port ], 60);
	is($rc, 0, $n->name . ': tables created') or diag "$out$err";
}
my $load = IPC::Run::start([ $ZkLockTest::PYTHON, $RUN, 'load', '--dir', $dir, '--host', $A->host,
		'--a', $A->port, '--b', $B->port, '--zk', $zk->{hosts}, '--queue', 'gq', '--seconds', 24 ],
	'<', \undef, '>', "$dir/load.out", '2>', "$dir/load.err", IPC::Run::timeout(900));
my $T0 = time;

sub progress
{
	open(my $fh, '<', "$dir/progress") or return (0, 0, 0);
	my $l = <$fh> // '';
	close $fh;
	return $l =~ /^(\d+) (\d+) (\d+)/ ? ($1, $2, $3) : (0, 0, 0);
}

# the producer waits between transactions while the fault is on
sub with_producer_paused
{
	my ($what, $code) = @_;
	open(my $fh, '>', "$dir/pause") or die $!;
	close $fh;
	my $paused = wait_until(
		sub {
			my (undef, $p, $t) = progress();
			return -e "$dir/paused" || ($t > 0 && $p >= $t);
		},
		30, 0.05);
	note "$what: the producer did not pause within 30 s" unless $paused;
	$code->();
	unlink "$dir/pause";
	note sprintf('%+.1fs %s done; progress %s', time - $T0, $what, join('/', progress()));
	return;
}

sub at
{
	my ($s) = @_;
	my $d = $T0 + $s - time;
	usleep(int($d * 1e6)) if $d > 0;
}

# fault 1: A's worker terminated
at(6);
my %fault;
with_producer_paused('terminate A\'s worker', sub {
	my $wpid = worker_pid($A);
	is($A->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)"), 't', "A's worker ($wpid) terminated");
	$fault{worker_a} = defined wait_for_worker($A, $wpid, 60);
	ZkLockTest::wait_connected($A, 'A did not connect again');
});
ok($fault{worker_a}, 'A has a new worker');
my ($c1) = progress();
note "consumed before the ZooKeeper restart: $c1";

# fault 2: ZooKeeper killed and started again
at(12);
with_producer_paused('ZooKeeper restart', sub {
	zk_kill($zk);
	usleep(3_000_000);
	zk_restart($zk);
	ZkLockTest::wait_connected($_, $_->name . ' did not connect again') foreach ($A, $B);
});

# fault 3: B's worker SIGKILLed (B crash-restarts)
at(18);
with_producer_paused('kill B\'s worker', sub {
	my $wpid = worker_pid($B);
	kill 'KILL', $wpid;
	# B restarts: its queries fail meanwhile
	$fault{worker_b} = wait_until(sub { my $p = eval { worker_pid($B) }; defined $p && $p != $wpid }, 90, 0.2);
	ZkLockTest::wait_connected($B, 'B did not connect after its crash restart');
});
ok($fault{worker_b}, 'B crash-restarted with a new worker');
my ($c3, $p3, $t3) = progress();
ok($c3 < $t3, "the faults came while items were still in the queue ($c3 of $t3 consumed after the last)");

eval { $load->finish; 1 } or do { diag "load: $@"; $load->kill_kill; };
my $lout = slurp_file("$dir/load.out");
my $lerr = slurp_file("$dir/load.err");
my ($lj) = $lout =~ /^GROUPS-LOAD (\{.*\})\s*$/m;
my $L = defined $lj ? decode_json($lj) : {};
ok(defined $lj && $L->{done}, 'the load consumed every item: ' . ($lj // 'no report')) or diag "$lout\n$lerr";
note "load: $lout";
is_deeply($L->{deaths} // ['?'], [], 'no client died of an unexpected exception');
is_deeply($L->{hung} // ['?'], [], 'no client hung');
ok($L->{handouts_written}, 'the hand-outs were recorded in g_handouts');
cmp_ok($L->{samples} // 0, '>=', 50, "the sampler listed entries through ZooKeeper ($L->{samples} times)");
cmp_ok($L->{grouped_listed} // 0, '>=', 20, "and saw grouped items there ($L->{grouped_listed})");
is($L->{max_in_entries}, 1, 'never two items of a group in entries at once (sampled through ZooKeeper)')
  or diag encode_json($L->{sample_violations} // []);

my ($crc, $cout, $cerr) = py([ $RUN, 'check', '--host', $A->host, '--a', $A->port, '--b', $B->port ], 120);
my ($cj) = $cout =~ /^GROUPS-CHECK (\{.*\})\s*$/m;
my $F = defined $cj ? decode_json($cj) : {};
ok(defined $cj, 'the checker ran') or diag "$cout$cerr";
note "check: $cout";
is($F->{produced}, $L->{total}, "every item was produced ($F->{produced})");
is($F->{lost}, 0, 'no item lost');
is($F->{duplicated}, 0, 'no item consumed twice');
is($F->{phantom}, 0, 'no item consumed that was never produced');
is($F->{committed_not_recorded}, 0, 'every acknowledged consume is in g_consumed');
is($F->{order_violations}, 0, "each group's committed items in the order 1..N") or diag explain $F->{examples}{order};
is($F->{head_violations}, 0, 'every hand-out of a group was its head (a rollback kept it there)')
  or diag explain $F->{examples}{head};
is($F->{overlaps}, 0, 'no two hand-outs of one group overlapped in time') or diag explain $F->{examples}{overlap};
is($F->{same_group_batch}, 0, 'no dequeue returned two items of one group');
is($F->{attempts_undercount}, 0, 'attempts never below the hand-outs seen');
is($F->{groups}, 6, 'six groups handed out');
cmp_ok($F->{parallel} // 0, '>=', 1, "hand-outs of different groups overlapped ($F->{parallel} pairs, "
	  . "up to $F->{max_group_parallel} groups at once)");
cmp_ok($F->{ungrouped_consumed} // 0, '==', 40, 'the 40 ungrouped items were consumed');
cmp_ok($F->{rollbacks} // 0, '>=', 10, "consumers rolled back hand-outs ($F->{rollbacks})");
cmp_ok($F->{handed_out_again} // 0, '>=', 10, "items were handed out again ($F->{handed_out_again})");
cmp_ok($F->{batches} // 0, '>=', 1, "some dequeues returned several items ($F->{batches})");
foreach my $cl (qw(A B))
{
	cmp_ok($F->{by_cluster}{$cl} // 0, '>=', 10, "cluster $cl consumed items (" . ($F->{by_cluster}{$cl} // 0) . ')');
}
is($crc, 0, "the checker's verdict: " . ($F->{verdict} // '?'));

# the checker can fail
my ($mrc, $mout, $merr) = py([ $RUN, 'check', '--host', $A->host, '--a', $A->port, '--b', $B->port, '--mutate' ], 120);
my ($mj) = $mout =~ /^GROUPS-CHECK (\{.*\})\s*$/m;
my $M = defined $mj ? decode_json($mj) : {};
ok($mrc == 1 && ($M->{overlaps} // 0) >= 1 && ($M->{order_violations} // 0) >= 1
	  && ($M->{head_violations} // 0) >= 1 && ($M->{duplicated} // 0) >= 1 && ($M->{lost} // 0) >= 1,
	'on mutated data the checker reports an overlap, an order and a head violation, a duplicate and a loss')
  or diag "$mout$merr";

nothing_left('gq', 'after the load');

# no server crashed on its own
foreach my $n ($A, $B)
{
	my @bad = grep { /PANIC:|TRAP:|terminated by signal (?!9\b)\d+/ } split /\n/, slurp_file($n->logfile);
	is(scalar(@bad), 0, $n->name . ': no PANIC, assertion failure or unexpected crash in the log')
	  or diag join("\n", @bad[ 0 .. ($#bad < 20 ? $#bad : 19) ]);
}

$A->stop;
$B->stop;
done_testing();

sub py
{
	my ($args, $timeout) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ $ZkLockTest::PYTHON, @$args ], '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout));
		1;
	};
	$err .= "\n[harness: $@]" unless $ok;
	return ($ok ? ($? >> 8) : -1, $out, $err);
}
