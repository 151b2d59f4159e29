
# 410_etl_arrivals.pl - durable arrivals and gates across three PostgreSQL
# clusters A, B and C (three system identifiers) on one ZooKeeper, checked
# through ZooKeeper itself.
#
#   1. An ETL run: a load step on C waits in zk_await('etl-run', 3) while
#      extract steps on A, B and C each arrive in a transaction.  Nothing is
#      in ZooKeeper before a COMMIT, the arrival is there when COMMIT
#      returns, the load step still waits after two commits and returns
#      true after the third.  zk_arrivals lists the three participants with
#      each one's cluster (its pg_control_system() identifier), port,
#      database and pid, arrived_at in commit order; ZooKeeper holds exactly
#      three persistent children under /zklock/arrivals/etl-run whose data
#      names the same clusters.  A step arriving through kazoo (a child it
#      creates) counts for zk_await and shows in zk_arrivals.
#   2. Steps that fail do not arrive: ROLLBACK, an error before COMMIT,
#      ROLLBACK TO SAVEPOINT, a backend terminated in its open transaction;
#      a load step waiting meanwhile still waits.  Their reruns (one with a
#      released savepoint) arrive and wake it.  Arriving twice (same
#      cluster, another cluster, twice in one transaction, together with a
#      new participant) is once: the first node is kept (same czxid, same
#      data), and the new participant of that transaction arrives.
#   3. Crash exactness: on B an arrival committed just before an immediate
#      stop is there after the restart; one whose transaction was open at
#      the stop never arrives.  On C, ZooKeeper frozen (SIGSTOP) right
#      before the COMMIT of an arrival: COMMIT fails with 08006 within
#      zklock.commit_timeout, and after the thaw (once the worker settled
#      its transaction nodes) nothing arrived; the rerun does.
#   4. Gates: a close rolled back leaves no node; a committed close creates
#      the persistent node /zklock/gates/<name>; zk_gate_wait with timeout
#      200ms returns false while it is closed.  Two waiters on A, one on B
#      and a kazoo Barrier.wait() still wait after an open that rolled back
#      and while a transaction on C that opened the gate is not committed
#      (the node is still there); they all return once it commits.  A gate
#      closed by kazoo's Barrier.create() (closing it again in SQL changes
#      nothing) makes SQL waiters on B and C wait until kazoo's remove().
#   5. zk_arrivals_reset returns how many it removed and leaves no child,
#      is not undone by ROLLBACK, and a zk_await after it waits again for a
#      new arrival.
#   6. Bad input (NULL 22004; empty, 256-byte names and participants,
#      parties below 1, negative timeouts 22023) creates nothing in
#      ZooKeeper.  On a hot standby of A, zk_arrive, zk_gate_open and
#      zk_gate_close fail with 25006 and create nothing, while zk_gate_wait
#      (woken by the primary's open), zk_await and zk_arrivals work.
#      Participants of 255 ASCII bytes and of 127 two-byte characters are
#      stored and read back whole.
#   7. Last: an arrival whose name and participant are both 127 two-byte
#      characters (762 characters each once encoded) commits, is in
#      ZooKeeper and in zk_arrivals whole, and C's worker survives it.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk_ref;
END { zk_thaw($zk_ref) if $zk_ref && $zk_ref->{frozen}; }

my $T0 = time();
my $zk = zk_start();
$zk_ref = $zk;
my %opts = (
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.commit_timeout = '3s'\n");
my $A = zk_streaming_node('etlA', $zk, %opts);
my $B = zk_node('etlB', $zk, %opts);
my $C = zk_node('etlC', $zk, %opts);
my %node = (A => $A, B => $B, C => $C);

my $ROOT = '/zklock';
my $ARR = "$ROOT/arrivals";
my $GATES = "$ROOT/gates";
my $TXNS = "$ROOT/txns";

sub sql { return $_[0]->safe_psql('postgres', $_[1]); }

my %sysid = map { $_ => sql($node{$_}, 'SELECT system_identifier FROM pg_control_system()') } qw(A B C);
is(scalar(keys %{ { reverse %sysid } }), 3, "three clusters, three system identifiers ($sysid{A}, $sysid{B}, $sysid{C})");

# The children of $path as a list of { name, owner, czxid, data } sorted by
# name (owner: the ephemeralOwner in hex, 0x0 for a persistent node).  Dies
# when ZooKeeper cannot be asked, so that an empty list is never a failed
# query.
sub nodes_of { return zk_nodes_of($zk, $_[0], data => 1); }

# the participants arrived at $name according to ZooKeeper, "a,b,c"
sub arrived
{
	my ($name) = @_;
	return join(',', map { $_->{name} } nodes_of("$ARR/$name"));
}

# every path under the root, as a hash (dies when ZooKeeper cannot be asked)
sub all_paths
{
	return map { (split / /, $_)[0] => 1 } grep { $_ ne '' } split /\n/, zkq_or_die($zk, 'tree', $ROOT);
}

# the cluster named in a node's JSON data ('' if none)
sub cluster_of
{
	my ($data) = @_;
	my $j = eval { decode_json($data) };
	return ref($j) eq 'HASH' ? ($j->{cluster} // '') : '';
}

# wait until the workers have settled every transaction node (nothing left
# under txns), so that a later "nothing arrived" is final
sub settled
{
	my ($what) = @_;
	ok(scalar(zk_wait_count($zk, $TXNS, 0, 20)), "$what: no transaction node left");
	sleep 0.5;
	return;
}

# a kazoo client running test/gate_kazoo.py (protocol of ZkLockTest::Kazoo)
sub gate_kazoo { return kazoo_driver($zk, 'gate_kazoo.py'); }

# wait for a statement left running in a session; a statement that does not
# end in $secs is ended with the client, so that the test goes on
sub finish { return $_[0]->wait_or_kill($_[1]); }

# $s begins a transaction and arrives at $run as $who
sub arrive_in
{
	my ($s, $run, $who) = @_;
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT zk_arrive('$run', '$who')");
	return;
}

# send $sql in session $s and wait until its backend runs it
sub start_waiting
{
	my ($n, $s, $sql, $like) = @_;
	$s->send($sql);
	return wait_for_backend_active($n, $s->pid, $like, 30);
}

#
# 1. The ETL run: three extract steps arrive, the load step awaits them
#
my $load = new_session($C, name => 'load');
ok(start_waiting($C, $load, "SELECT zk_await('etl-run', 3)", '%zk_await%'),
	'the load step on C waits in zk_await');
my %ex;
my %window;
my $n = 0;
foreach my $c (qw(A B C))
{
	$n++;
	my $s = $ex{$c} = new_session($node{$c}, name => "extract_$c");
	arrive_in($s, 'etl-run', "extract-$c");
	sleep 0.3;
	is(scalar(nodes_of("$ARR/etl-run")), $n - 1, "extract $c: not in ZooKeeper before COMMIT");
	ok($load->running, "extract $c: the load step waits while " . ($n - 1) . " arrived and $c has not committed");
	my $t = time();
	$s->query_safe('COMMIT');
	$window{$c} = [ $t, time() ];
	is(arrived('etl-run'), join(',', map { "extract-$_" } (qw(A B C))[ 0 .. $n - 1 ]),
		"extract $c: in ZooKeeper when COMMIT returns");
	if ($n < 3)
	{
		sleep 0.7;
		ok($load->running, "the load step still waits after $n commits");
	}
}
my $t3 = time();
my $r = finish($load, 15);
is($r->{out}, 't', 'the load step returns true after the third COMMIT') or diag $r->{err};
ok($r->{done} && time() - $t3 < 10, sprintf('within %.2fs of it', time() - $t3));

my @an = nodes_of("$ARR/etl-run");
is(join(',', map { $_->{name} } @an), 'extract-A,extract-B,extract-C',
	'ZooKeeper: exactly three children under /zklock/arrivals/etl-run');
is(join(',', map { $_->{owner} } @an), '0x0,0x0,0x0', 'persistent nodes');
is(join(',', map { cluster_of($_->{data}) } @an), join(',', map { $sysid{$_} } qw(A B C)),
	"their data names each step's cluster") or diag join("\n", map { $_->{data} } @an);

my $want = join("\n",
	map { "extract-$_|$sysid{$_}|" . $node{$_}->port . '|postgres|' . $ex{$_}->pid } qw(A B C));
foreach my $c (qw(A B C))
{
	is(sql($node{$c}, "SELECT participant, cluster, port, database, pid FROM zk_arrivals('etl-run') ORDER BY participant"),
		$want, "zk_arrivals on $c: the three participants, their clusters, ports, databases and pids");
}
is(sql($A, "SELECT count(*) FROM zk_arrivals('etl-run') WHERE host IS NOT NULL AND host <> ''"), '3',
	'zk_arrivals: every arrival names a host');
my @at = split /\n/, sql($B, "SELECT extract(epoch FROM arrived_at) FROM zk_arrivals('etl-run') ORDER BY participant");
my @in = grep { $at[$_] >= $window{ (qw(A B C))[$_] }[0] - 1 && $at[$_] <= $window{ (qw(A B C))[$_] }[1] + 1 } 0 .. 2;
is(scalar(@in), 3, 'arrived_at of each is the time of its COMMIT')
  or diag "arrived_at @at; commits " . join(' ', map { "$_->[0]-$_->[1]" } @window{qw(A B C)});
ok($at[0] < $at[1] && $at[1] < $at[2], 'arrived_at in commit order');
is(sql($B, "SELECT zk_await('etl-run', 3, '0')") . sql($B, "SELECT zk_await('etl-run', 4, '0')"), 'tf',
	'zk_await with timeout 0: 3 arrived, not 4');
$_->quit foreach values %ex;

# a Python step arrives through kazoo (a persistent child, no data): it
# counts, and wakes a SQL waiter
my $mix = new_session($C, name => 'mixed');
ok(start_waiting($C, $mix, "SELECT zk_await('etl-mixed', 2, '60s')", '%zk_await%'),
	'a load step on C awaits etl-mixed, 2 parties');
sql($B, "SELECT zk_arrive('etl-mixed', 'sql-extract')");
sleep 0.5;
ok($mix->running, 'one arrival: it waits');
ok(defined(zkq($zk, 'create', "$ARR/etl-mixed/py-extract")), 'a kazoo client creates etl-mixed/py-extract');
$r = finish($mix, 10);
is($r->{out}, 't', "the kazoo step's arrival counts: zk_await returns true") or diag $r->{err};
is(sql($A, "SELECT string_agg(participant || ':' || coalesce(cluster, 'none'), ',' ORDER BY participant) FROM zk_arrivals('etl-mixed')"),
	"py-extract:none,sql-extract:$sysid{B}", 'zk_arrivals lists both (no cluster for the kazoo node)');
is(sql($A, "SELECT zk_arrivals_reset('etl-mixed')"), '2', 'reset removes both');
$mix->quit;

#
# 2. Failed steps do not arrive; their reruns do; arriving twice is once
#
my $load2 = new_session($A, name => 'load2');
ok(start_waiting($A, $load2, "SELECT zk_await('etl-rerun', 3, '120s')", '%zk_await%'),
	'a load step on A awaits etl-rerun');

my $sa = new_session($A, name => 'stepA');
arrive_in($sa, 'etl-rerun', "extract-A");
$sa->query_safe('ROLLBACK');

my $sb = new_session($B, name => 'stepB');
arrive_in($sb, 'etl-rerun', "extract-B");
$r = $sb->query('SELECT 1/0');
is($r->{sqlstate}, '22012', 'step B fails after its zk_arrive');
$sb->query('COMMIT');
$sb->query_safe('BEGIN');
$sb->query_safe('SAVEPOINT s');
$sb->query_safe("SELECT zk_arrive('etl-rerun', 'extract-B')");
$sb->query_safe('ROLLBACK TO SAVEPOINT s');
$sb->query_safe('COMMIT');

my $sc = new_session($C, name => 'stepC');
arrive_in($sc, 'etl-rerun', "extract-C");
my $cpid = $sc->pid;
is(sql($C, "SELECT pg_terminate_backend($cpid)"), 't', 'step C terminated in its open transaction');
ok(wait_until(sub { sql($C, "SELECT count(*) FROM pg_stat_activity WHERE pid = $cpid") eq '0' }, 20, 0.1),
	'its backend is gone');
$sc->kill_client;
settled('failed steps');
is(arrived('etl-rerun'), '', 'ROLLBACK, an error, ROLLBACK TO SAVEPOINT and a terminated backend: nobody arrived');
is(sql($B, "SELECT count(*) FROM zk_arrivals('etl-rerun')") . sql($B, "SELECT zk_await('etl-rerun', 1, '0')"),
	'0f', 'zk_arrivals and zk_await agree');
ok($load2->running, 'the load step still waits');

arrive_in($sa, 'etl-rerun', "extract-A");
$sa->query_safe('COMMIT');
$sb->query_safe('BEGIN');
$sb->query_safe('SAVEPOINT s');
$sb->query_safe("SELECT zk_arrive('etl-rerun', 'extract-B')");
$sb->query_safe('RELEASE SAVEPOINT s');
$sb->query_safe('COMMIT');
is(arrived('etl-rerun'), 'extract-A,extract-B', 'reruns of A and B (a released savepoint) arrived');
sleep 0.5;
ok($load2->running, 'the load step waits for the third');
my $sc2 = new_session($C, name => 'stepC2');
arrive_in($sc2, 'etl-rerun', "extract-C");
$sc2->query_safe('COMMIT');
$r = finish($load2, 15);
is($r->{out}, 't', 'the rerun of C arrived: the load step returns true') or diag $r->{err};

my ($first) = grep { $_->{name} eq 'extract-A' } nodes_of("$ARR/etl-rerun");
$sa->query_safe("SELECT zk_arrive('etl-rerun', 'extract-A')");
sql($B, "SELECT zk_arrive('etl-rerun', 'extract-A')");
arrive_in($sa, 'etl-rerun', "extract-A");
$sa->query_safe("SELECT zk_arrive('etl-rerun', 'extract-D')");
$sa->query_safe("SELECT zk_arrive('etl-rerun', 'extract-D')");
$sa->query_safe("SELECT zk_arrive('etl-rerun', 'extract-A')");
$r = $sa->query('COMMIT');
is($r->{sqlstate}, '00000', 'a transaction arriving as extract-A again and twice as extract-D commits')
  or diag $r->{err};
my @rn = nodes_of("$ARR/etl-rerun");
is(join(',', map { $_->{name} } @rn), 'extract-A,extract-B,extract-C,extract-D',
	'ZooKeeper: extract-A once, and extract-D (new in that transaction) arrived');
my ($again) = grep { $_->{name} eq 'extract-A' } @rn;
is($again->{czxid}, $first->{czxid}, "arriving again (from A, from B, twice in one transaction) kept the first node (czxid $first->{czxid})");
is($again->{data}, $first->{data}, 'and its data');
is(cluster_of($again->{data}), $sysid{A}, 'which names A, not B');
is(sql($C, "SELECT count(*) FILTER (WHERE participant = 'extract-A') || '/' || count(*) FROM zk_arrivals('etl-rerun')"),
	'1/4', 'zk_arrivals: extract-A counted once, four participants');
is(sql($C, "SELECT zk_await('etl-rerun', 4, '0')") . sql($C, "SELECT zk_await('etl-rerun', 5, '200ms')"), 'tf',
	'zk_await: four distinct participants, not five');
$sa->quit;
$sb->quit;
$sc2->quit;

#
# 3. Crash exactness
#
my $sb1 = new_session($B, name => 'crashB1');
arrive_in($sb1, 'etl-crash', "extract-B1");
$sb1->query_safe('COMMIT');
my $sb2 = new_session($B, name => 'crashB2');
arrive_in($sb2, 'etl-crash', "extract-B2");
$B->stop('immediate');
$sb1->kill_client;
$sb2->kill_client;
$B->start;
my $st = wait_for_state($B, 'connected', 60);
is($st->{state}, 'connected', 'B restarted after an immediate stop, its worker connected');
settled('after the restart of B');
is(arrived('etl-crash'), 'extract-B1',
	'committed before the stop: arrived; open at the stop: never arrived');
is(sql($B, "SELECT string_agg(participant, ',') FROM zk_arrivals('etl-crash')"), 'extract-B1',
	'zk_arrivals on B after the restart agrees');

# ZooKeeper frozen right before the COMMIT of an arrival on C
my $sf = new_session($C, name => 'frozen');
arrive_in($sf, 'etl-crash', "extract-C");
ok(zk_freeze($zk), 'ZooKeeper frozen (SIGSTOP)');
$r = $sf->query('COMMIT', 60);
my $commit_secs = $r->{elapsed};
ok(zk_thaw($zk), 'ZooKeeper thawed');
is($r->{sqlstate}, '08006', 'COMMIT with ZooKeeper frozen fails with 08006') or diag $r->{err};
ok($r->{done} && $commit_secs < 12, sprintf('within commit_timeout 3s + margin (%.1fs)', $commit_secs));
is($sf->query('SELECT 1')->{sqlstate}, '00000', 'the session goes on');
foreach my $c (qw(A B C))
{
	$st = wait_for_state($node{$c}, 'connected', 60);
	is($st->{state}, 'connected', "$c: worker connected after the thaw");
}
settled('after the thaw');
is(arrived('etl-crash'), 'extract-B1', 'the failed COMMIT never arrived, even after the thaw');
arrive_in($sf, 'etl-crash', "extract-C");
$sf->query_safe('COMMIT');
is(arrived('etl-crash'), 'extract-B1,extract-C', 'its rerun arrives');
$sf->quit;

#
# 4. Gates
#
my $G = "$GATES/load-window";
my $ga = new_session($A, name => 'gateA');
$ga->query_safe('BEGIN');
$ga->query_safe("SELECT zk_gate_close('load-window')");
ok(!zk_exists($zk, $G), 'close: no gate node before COMMIT');
$ga->query_safe('ROLLBACK');
sleep 0.5;
ok(!zk_exists($zk, $G), 'a close rolled back: no gate node');
is(sql($B, "SELECT zk_gate_wait('load-window', '0')"), 't', 'the gate is open');
$ga->query_safe('BEGIN');
$ga->query_safe("SELECT zk_gate_close('load-window')");
$ga->query_safe('COMMIT');
my @gn = grep { $_->{name} eq 'load-window' } nodes_of($GATES);
is(scalar(@gn), 1, "a close committed: $G exists when COMMIT returns");
is($gn[0]{owner} // '', '0x0', 'a persistent node');
$r = one_shot($B, "SELECT zk_gate_wait('load-window', '200ms')", 30);
is($r->{out}, 'f', "zk_gate_wait('load-window', '200ms') on B: false while closed");
ok($r->{elapsed} >= 0.15 && $r->{elapsed} < 5, sprintf('after the timeout (%.2fs)', $r->{elapsed}));

my @gw = (
	[ $A, new_session($A, name => 'gwA1') ],
	[ $A, new_session($A, name => 'gwA2') ],
	[ $B, new_session($B, name => 'gwB') ]);
ok(start_waiting($_->[0], $_->[1], "SELECT zk_gate_wait('load-window', '120s')", '%zk_gate_wait%'),
	$_->[1]->name . ' waits at the gate') foreach @gw;
my $kw = gate_kazoo();
my $kc = gate_kazoo();
$kw->send("wait $G 120");
ok(!defined($kw->read_line(1)) && $kw->{h}->pumpable, 'kazoo Barrier.wait() waits at the gate');

my $gc = new_session($C, name => 'gateC');
$gc->query_safe('BEGIN');
$gc->query_safe("SELECT zk_gate_open('load-window')");
$gc->query_safe('ROLLBACK');
sleep 1;
is(scalar(grep { $_->[1]->running } @gw), 3, 'an open rolled back: the three SQL waiters still wait');
ok(!defined($kw->read_line(0.2)) && $kw->{h}->pumpable, 'and kazoo');
ok(zk_exists($zk, $G), 'the gate node is still there');

$gc->query_safe('BEGIN');
$gc->query_safe("SELECT zk_gate_open('load-window')");
sleep 1;
is(scalar(grep { $_->[1]->running } @gw), 3, 'an open not yet committed: the three SQL waiters still wait');
ok(!defined($kw->read_line(0.2)) && $kw->{h}->pumpable, 'and kazoo');
ok(zk_exists($zk, $G), 'the gate node is still there');
my $t_open = time();
$gc->query_safe('COMMIT');
ok(!zk_exists($zk, $G), 'the open committed: no gate node when COMMIT returns');
foreach my $w (@gw)
{
	$r = finish($w->[1], 10);
	is($r->{out}, 't', $w->[1]->name . ': zk_gate_wait returns true') or diag $r->{err};
}
is($kw->read_line(10), 'cleared', 'kazoo Barrier.wait() returns (cleared)');
ok(time() - $t_open < 10, sprintf('all within %.2fs of the COMMIT', time() - $t_open));

# kazoo closes and opens, SQL waits
my $KG = "$GATES/kz-gate";
is($kc->cmd("create $KG"), 'ok', 'kazoo Barrier.create() closes kz-gate');
my $kz_czxid = zk_czxid($zk, $KG);
$r = one_shot($A, "SELECT zk_gate_wait('kz-gate', '200ms')", 30);
is($r->{out}, 'f', 'SQL zk_gate_wait on the gate kazoo closed: false after 200ms');
sql($A, "BEGIN; SELECT zk_gate_close('kz-gate'); COMMIT;");
is(zk_czxid($zk, $KG), $kz_czxid, 'closing it again in SQL changed nothing (same czxid)');
my @kw = ([ $B, new_session($B, name => 'kzB') ], [ $C, new_session($C, name => 'kzC') ]);
ok(start_waiting($_->[0], $_->[1], "SELECT zk_gate_wait('kz-gate', '120s')", '%zk_gate_wait%'),
	$_->[1]->name . ' waits at the gate kazoo closed') foreach @kw;
sleep 0.7;
is(scalar(grep { $_->[1]->running } @kw), 2, 'both still wait');
is($kc->cmd("remove $KG"), 'removed true', 'kazoo Barrier.remove() opens it');
foreach my $w (@kw)
{
	$r = finish($w->[1], 10);
	is($r->{out}, 't', $w->[1]->name . ': zk_gate_wait returns true') or diag $r->{err};
}
$_->[1]->quit foreach @gw, @kw;
$ga->quit;
$gc->quit;
$kw->quit;
$kc->quit;

#
# 5. zk_arrivals_reset
#
is(sql($C, "SELECT zk_arrivals_reset('etl-run')"), '3', 'zk_arrivals_reset returns 3');
is(arrived('etl-run'), '', 'no child left in ZooKeeper');
is(sql($A, "SELECT count(*) FROM zk_arrivals('etl-run')") . sql($A, "SELECT zk_await('etl-run', 1, '0')"),
	'0f', 'zk_arrivals and zk_await see none');
is(sql($B, "SELECT zk_arrivals_reset('etl-run')"), '0', 'a second reset removes 0');
sql($A, "SELECT zk_arrive('etl-run', 'extract-A')");
is(sql($B, "BEGIN; SELECT zk_arrivals_reset('etl-run'); ROLLBACK;"), '1', 'a reset in a transaction removes 1');
is(arrived('etl-run'), '', 'and ROLLBACK does not undo it');
my $w5 = new_session($B, name => 'await5');
ok(start_waiting($B, $w5, "SELECT zk_await('etl-run', 1, '120s')", '%zk_await%'), 'zk_await after the reset');
sleep 0.7;
ok($w5->running, 'waits again');
sql($A, "BEGIN; SELECT zk_arrive('etl-run', 'extract-A'); COMMIT;");
$r = finish($w5, 10);
is($r->{out}, 't', 'and returns true at the next arrival') or diag $r->{err};
is(sql($A, "SELECT zk_arrivals_reset('etl-run')"), '1', 'reset again: 1');
$w5->quit;

#
# 6. Bad input creates nothing; a hot standby
#
my %before = all_paths();
my $bad = new_session($A, name => 'bad');
my @bad = (
	[ '22004', "SELECT zk_arrive(NULL, 'p')" ],
	[ '22004', "SELECT zk_arrive('bad-arr', NULL)" ],
	[ '22023', "SELECT zk_arrive('', 'p')" ],
	[ '22023', "SELECT zk_arrive('bad-arr', '')" ],
	[ '22023', "SELECT zk_arrive(repeat('x', 256), 'p')" ],
	[ '22023', "SELECT zk_arrive('bad-arr', repeat('p', 256))" ],
	[ '22023', "SELECT zk_arrive('bad-arr', repeat('é', 128))" ],
	[ '22004', "SELECT zk_await(NULL, 1)" ],
	[ '22004', "SELECT zk_await('bad-arr', NULL)" ],
	[ '22023', "SELECT zk_await('', 1)" ],
	[ '22023', "SELECT zk_await(repeat('x', 256), 1)" ],
	[ '22023', "SELECT zk_await('bad-arr', 0)" ],
	[ '22023', "SELECT zk_await('bad-arr', -3)" ],
	[ '22023', "SELECT zk_await('bad-arr', 1, '-1 second')" ],
	[ '22004', "SELECT * FROM zk_arrivals(NULL)" ],
	[ '22023', "SELECT * FROM zk_arrivals('')" ],
	[ '22004', "SELECT zk_arrivals_reset(NULL)" ],
	[ '22023', "SELECT zk_arrivals_reset(repeat('x', 256))" ],
	[ '22004', "SELECT zk_gate_close(NULL)" ],
	[ '22004', "SELECT zk_gate_open(NULL)" ],
	[ '22023', "SELECT zk_gate_close('')" ],
	[ '22023', "SELECT zk_gate_close(repeat('g', 256))" ],
	[ '22023', "SELECT zk_gate_open(repeat('g', 256))" ],
	[ '22004', "SELECT zk_gate_wait(NULL)" ],
	[ '22023', "SELECT zk_gate_wait('', '1s')" ],
	[ '22023', "SELECT zk_gate_wait('bad-gate', '-1 ms')" ],
	[ '22004', "SELECT zk_barrier_enter(NULL, 2)" ],
	[ '22004', "SELECT zk_barrier_enter('bad-bar', NULL)" ],
	[ '22023', "SELECT zk_barrier_enter('', 2)" ],
	[ '22023', "SELECT zk_barrier_enter(repeat('b', 256), 2)" ],
	[ '22023', "SELECT zk_barrier_enter('bad-bar', 0)" ],
	[ '22023', "SELECT zk_barrier_enter('bad-bar', 2, '-1s')" ],
	[ '22004', "SELECT zk_barrier_leave(NULL)" ],
	[ '22023', "SELECT zk_barrier_leave('bad-bar', '-1s')" ]);
my @commit_failed;
foreach my $b (@bad)
{
	# in a transaction that then commits: nothing may be left for COMMIT
	$bad->query_safe('BEGIN');
	$bad->query_safe('SAVEPOINT s');
	$r = $bad->query($b->[1]);
	is($r->{sqlstate}, $b->[0], "$b->[1]: $b->[0]") or diag $r->{err};
	$bad->query('ROLLBACK TO SAVEPOINT s');
	$r = $bad->query('COMMIT');
	push @commit_failed, "$b->[1]: $r->{sqlstate} $r->{err}" if $r->{sqlstate} ne '00000';
}
is(join("\n", @commit_failed), '', 'every transaction around bad input committed');
settled('bad input');
my %after = all_paths();
my @new = grep { !$before{$_} } sort keys %after;
is(join(' ', @new), '', 'bad input created nothing in ZooKeeper');
is(sql($A, "SELECT zk_gate_wait('bad-gate', '0')") . sql($A, "SELECT count(*) FROM zk_arrivals('bad-arr')"),
	't0', 'bad-gate open, nothing arrived at bad-arr');
# the limit is 255 bytes: exactly that is taken, and read back whole, also
# when it is 127 two-byte characters (762 characters once encoded)
sql($A, "SELECT zk_arrive('long-arr', repeat('p', 255))");
sql($A, "SELECT zk_arrive('long-arr', repeat('é', 127))");
is(join(',', map { length($_->{name}) } nodes_of("$ARR/long-arr")), '762,255',
	'ZooKeeper: the two long participants, whole (encoded)');
is(sql($A, "SELECT string_agg((participant IN (repeat('p', 255), repeat('é', 127)))::text || octet_length(participant), ',' ORDER BY participant COLLATE \"C\") FROM zk_arrivals('long-arr')"),
	'true255,true254', 'zk_arrivals returns a 255-byte and a 254-byte participant whole');
is(sql($A, "SELECT zk_arrivals_reset('long-arr')"), '2', 'reset');
$bad->quit;

# a hot standby of A
sql($A, "BEGIN; SELECT zk_gate_close('standby-gate'); COMMIT;");
my $S = zk_standby_node('etlA_standby', $A);
is(sql($S, 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
%before = all_paths();
standby_refuses($S,
	[ 'zk_arrive', "SELECT zk_arrive('standby-run', 'p')" ],
	[ 'zk_gate_open', "SELECT zk_gate_open('standby-gate')" ],
	[ 'zk_gate_close', "SELECT zk_gate_close('standby-other')" ]);
sleep 0.5;
@new = grep { !$before{$_} } sort keys %{ { all_paths() } };
is(join(' ', @new), '', 'standby: they created nothing in ZooKeeper');
ok(zk_exists($zk, "$GATES/standby-gate"), 'standby: the gate is still closed');
is(sql($S, "SELECT zk_await('etl-rerun', 4, '0')") . sql($S, "SELECT count(*) FROM zk_arrivals('etl-rerun')"),
	't4', 'standby: zk_await and zk_arrivals work');
$r = one_shot($S, "SELECT zk_gate_wait('standby-gate', '200ms')", 30);
is($r->{out}, 'f', 'standby: zk_gate_wait on the closed gate: false after 200ms') or diag $r->{err};
my $sw = new_session($S, name => 'standby_wait');
ok(start_waiting($S, $sw, "SELECT zk_gate_wait('standby-gate', '120s')", '%zk_gate_wait%'),
	'standby: a session waits at the gate');
sleep 0.5;
ok($sw->running, 'standby: it waits');
sql($A, "BEGIN; SELECT zk_gate_open('standby-gate'); COMMIT;");
$r = finish($sw, 10);
is($r->{out}, 't', "standby: it returns true once the primary's open commits") or diag $r->{err};
$sw->quit;

$S->stop;

#
# 7. The longest names: an arrival with a 254-byte name and a 254-byte
#    participant (762 characters each once encoded) is written and read
#    back whole, and the worker survives it (last: if it does not, C is gone)
#
my $wpid = worker_pid($C);
my $enc = '%C3%A9' x 127;
$r = one_shot($C, "SELECT zk_arrive(repeat('é', 127), repeat('é', 127))", 60);
is($r->{sqlstate}, '00000', 'an arrival with a 254-byte name and a 254-byte participant commits')
  or diag $r->{err};
ok(zk_exists($zk, "$ARR/$enc/$enc"), 'ZooKeeper: the node, name and participant whole');
is(sql($A, "SELECT participant = repeat('é', 127) FROM zk_arrivals(repeat('é', 127))"), 't',
	'zk_arrivals on A returns it whole');
my ($wrc, $wout) = $C->psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'zklock worker'", on_error_die => 0);
is("$wrc:" . ($wout // ''), "0:$wpid", "C is up and its worker did not crash (pid $wpid)");

$_->stop('fast', fail_ok => 1) foreach $A, $B, $C;
note sprintf('410_etl_arrivals: %.1fs', time() - $T0);
done_testing();
