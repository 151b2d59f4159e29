
# 350_queue_drop.pl - zk_queue_drop: an empty, unused queue's nodes go, all
# at once, and nothing of it is left behind (issue 23).
#
# Nodes are counted through ZooKeeper itself (test/zkq.py, kazoo), on two
# clusters A and B sharing one ZooKeeper (root namespace), and kazoo.
#
# - A queue used and drained: its 4 nodes (queue, entries, taken, delayed) go, the
#   call returns true; again, false; a name never used: false, and nothing
#   is created.  The worker forgets the queue at once (queues_tracked back
#   to what it was, no watch left on the server), and the queue works again
#   afterwards, on both clusters.  A queue past the end of ZooKeeper's
#   counter (a next node) goes with its next.
# - Refused with 55006, a lowercase message and a hint, and nothing changed
#   in ZooKeeper: a queue with items; a claim held by an open transaction in
#   another session of A (the in-use message), or of B (a claim in
#   ZooKeeper); a consumer waiting on A; this transaction's own items for
#   it; a kazoo item, a kazoo claim; a child of the queue's node that zklock
#   does not create.  Bad input: 22004, 22023.
# - Privileges: a role without the admin group gets 42501, with it the drop
#   works; PUBLIC has no EXECUTE.  Namespaces: a drop in namespace ns1
#   leaves the root namespace's queue of the same name alone.
# - Cross-cluster: B used the queue (its worker remembers the parents),
#   A drops it, B enqueues again: the item arrives exactly once, and B's
#   COMMIT has no warning.  A consumer waiting on B (invisible to A) while
#   A drops: it is served by an item enqueued after the drop.
# - One COMMIT creates 3,000 queues; they are consumed, dropped, and zero
#   nodes are left.
# - A race: B enqueues in a loop and consumes, while A drops repeatedly:
#   every item produced is consumed exactly once, and B's COMMITs have no
#   warning.  Then a consumer waits on B while A keeps dropping the queue
#   (B creates it again after each drop): it is served afterwards.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep sleep);
use ZkLockTest;

my $zk = zk_start();
# (one transaction below enqueues into 3,000 queues: about 260 kB, more than
# the default zklock.max_transaction_size)
my $A = zk_node('dropA', $zk, session_timeout => '6s', connect_timeout => '5s',
	conf => "zklock.max_transaction_size = '976kB'\n");
my $B = zk_node('dropB', $zk, session_timeout => '6s', connect_timeout => '5s');
my $Q = '/zklock/queues';

sub sqlA { return $A->safe_psql('postgres', $_[0]); }
sub sqlB { return $B->safe_psql('postgres', $_[0]); }

# the queue's nodes, counted through ZooKeeper: the node itself and its
# descendants (0 when it does not exist)
sub nodes
{
	my ($name) = @_;
	return zk_exists($zk, "$Q/$name") ? 1 + zk_count($zk, "$Q/$name") : 0;
}

# run $sql in a fresh session of $node (psql stops at the first error);
# returns (sqlstate, stdout, stderr), the SQLSTATE from the verbose message
sub try_sql
{
	my ($node, $sql, @extra) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose', @extra ],
		on_error_stop => 1);
	my $st = $err =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
	return ($st, $out, $err);
}

# a refused drop: 55006, a lowercase message naming the queue, a detail
# and a hint, and the queue's tree in ZooKeeper exactly as before
sub refused
{
	my ($node, $name, $msg_re, $what) = @_;
	my $before = zk_tree($zk, "$Q/$name");
	my ($st, $out, $err) = try_sql($node, "SELECT zk_queue_drop('$name')");
	is($st, '55006', "$what: refused with 55006") or diag $err;
	like($err, qr/ERROR:\s+55006: cannot drop zklock queue "\Q$name\E" $msg_re/,
		"$what: the message says why");
	like($err, qr/DETAIL:\s+\S.*nothing was dropped\./, "$what: a detail");
	like($err, qr/HINT:\s+[A-Z]/, "$what: a hint");
	is(zk_tree($zk, "$Q/$name"), $before, "$what: nothing changed in ZooKeeper");
	return $err;
}

my $WC0 = zk_watch_count($zk);
my ($st, $out);

# ---- a used, drained queue goes, and comes back when used again ----
sqlA(q{SELECT zk_enqueue('d1', 'a'), zk_enqueue('d1', 'b')});
is(sqlA(q{SELECT string_agg(body, ',' ORDER BY msg_id) FROM zk_try_dequeue('d1', 5)}), 'a,b',
	'd1: two items enqueued and consumed');
ok(wait_until(sub { zk_count($zk, "$Q/d1/taken") == 0 && zk_count($zk, "$Q/d1/entries") == 0 }, 10),
	'd1: consumed in ZooKeeper');
is(nodes('d1'), 4, 'd1 leaves 4 persistent nodes (queue, entries, taken, delayed) when empty');
my $tracked = zk_status_value($A, 'queues_tracked');
ok($tracked >= 1, "A's worker keeps state for d1 ($tracked)");
is(sqlA(q{SELECT zk_queue_drop('d1')}), 't', 'zk_queue_drop(d1) returns true');
is(nodes('d1'), 0, 'd1: no node left under its path');
ok(!zk_exists($zk, "$Q/d1"), 'd1: its path is gone');
is(zk_status_value($A, 'queues_tracked'), '0', "the worker forgot d1 at once (queues_tracked 0)");
ok(wait_until(sub { zk_watch_count($zk) == $WC0 }, 10, 0.2), 'no watch left on the server')
  or diag 'watches: ' . zk_watch_count($zk) . " (before: $WC0)";
is(sqlA(q{SELECT zk_queue_drop('d1')}), 'f', 'dropped again: false');
is(sqlA(q{SELECT zk_queue_drop('never-used')}), 'f', 'a queue never used: false');
ok(!zk_exists($zk, "$Q/never-used"), '... and nothing was created for it');

sqlA(q{SELECT zk_enqueue('d1', 'c')});
is(sqlB(q{SELECT string_agg(body, ',') FROM zk_dequeue('d1', '10s')}), 'c',
	'd1 works again after the drop: enqueued on A, dequeued on B');
ok(wait_until(sub { nodes('d1') == 4 }, 10), 'd1: its 4 nodes are back, empty');

# past the end of the counter, the queue's next node goes with it
zkq($zk, 'create', "$Q/dnext/entries");
zkq($zk, 'create', "$Q/dnext/taken");
zkq($zk, 'create', "$Q/dnext/next", '2147483700');
is(nodes('dnext'), 4, 'dnext: queue, entries, taken and next');
is(sqlA(q{SELECT zk_queue_drop('dnext')}), 't', 'dnext dropped');
is(nodes('dnext'), 0, 'dnext: nothing left, next included');

# ---- refusals: 55006, nothing changed ----
sqlA(q{SELECT zk_enqueue('d2', 'x')});
my $err = refused($A, 'd2', 'because it is not empty', 'an item');
like($err, qr/It holds 1 item and 0 claims/, 'the detail counts the item');

# a claim held by an open transaction of another session of A
my $holder = new_session($A, name => 'holder');
$holder->query_safe('BEGIN');
is($holder->query_safe(q{SELECT body FROM zk_try_dequeue('d2')}), 'x', 'a session of A claims the item');
$err = refused($A, 'd2', 'because it is in use on this server', 'a claim held on A');
like($err, qr/holds 1 claim on it/, 'the detail names the claim');
$holder->query_safe('COMMIT');
is(sqlA(q{SELECT zk_queue_drop('d2')}), 't',
	'right after the COMMIT that consumed it, the drop waits for the consume and drops');
is(nodes('d2'), 0, 'd2: nothing left');

# a claim held on B: A sees it in ZooKeeper
sqlA(q{SELECT zk_enqueue('d3', 'y')});
my $bholder = new_session($B, name => 'bholder');
$bholder->query_safe('BEGIN');
is($bholder->query_safe(q{SELECT body FROM zk_try_dequeue('d3')}), 'y', 'a session of B claims the item');
$err = refused($A, 'd3', 'because it is not empty', 'a claim held on B');
like($err, qr/It holds 1 item and 1 claim/, 'the detail counts the item and its claim');
$bholder->query_safe('ROLLBACK');
ok(wait_until(sub { zk_count($zk, "$Q/d3/taken") == 0 }, 10), "B's rollback released the claim");
refused($A, 'd3', 'because it is not empty', 'the item back');
is(sqlA(q{SELECT zk_queue_purge('d3')}), '1', 'purged');
is(sqlA(q{SELECT zk_queue_drop('d3')}), 't', 'then dropped');

# a consumer waiting on A
my $waiter = new_session($A, name => 'waiter');
$waiter->send(q{SELECT body FROM zk_dequeue('d4', '60s')});
ok(wait_until(sub { sqlA(q{SELECT local_waiting FROM zk_queues WHERE queue = 'd4'}) eq '1' }, 10),
	'a consumer waits on d4');
$err = refused($A, 'd4', 'because it is in use on this server', 'a waiting consumer');
like($err, qr/is dequeuing from it/, 'the detail names the waiting session');
sqlB(q{SELECT zk_enqueue('d4', 'late')});
my $r = $waiter->wait(30);
is("$r->{sqlstate}:$r->{out}", '00000:late', 'the waiter is served as if nothing happened');
is(sqlA(q{SELECT zk_queue_drop('d4')}), 't', 'once served, d4 is dropped');

# this transaction's own items for it
($st, $out, $err) = try_sql($A,
	q{BEGIN; SELECT zk_enqueue('d5', 'mine'); SELECT zk_queue_drop('d5'); COMMIT;});
is($st, '55006', "a drop in the transaction that enqueued into it: 55006");
like($err, qr/cannot drop zklock queue "d5" while this transaction enqueues into it.*HINT:\s+\S/s,
	'... saying why, with a hint');
ok(!zk_exists($zk, "$Q/d5/entries") || zk_count($zk, "$Q/d5/entries") == 0,
	'... and the transaction was rolled back: no item');

# bad input
($st) = try_sql($A, q{SELECT zk_queue_drop(NULL)});
is($st, '22004', 'NULL: 22004');
($st) = try_sql($A, q{SELECT zk_queue_drop('')});
is($st, '22023', 'empty name: 22023');
($st) = try_sql($A, q{SELECT zk_queue_drop(repeat('q', 256))});
is($st, '22023', 'a name over 255 bytes: 22023');

# kazoo's item, kazoo's claim, another client's node
my $kz = queue_kazoo($zk);
is($kz->cmd("put $Q/d6 100 6b31"), 'ok', 'kazoo puts an item into d6');
refused($A, 'd6', 'because it is not empty', "kazoo's item");
is($kz->cmd("get $Q/d6 5"), 'item 6b31', 'kazoo claims it (get, not consumed)');
$err = refused($A, 'd6', 'because it is not empty', "kazoo's claim");
like($err, qr/It holds 1 item and 1 claim/, "... counted");
is($kz->cmd("consume $Q/d6"), 'true', 'kazoo consumes it');
is(sqlA(q{SELECT zk_queue_drop('d6')}), 't', 'then d6 is dropped');
is(nodes('d6'), 0, 'd6: nothing left');
my $kz2 = queue_kazoo($zk);
is($kz2->cmd("put $Q/d6 100 6b32"), 'ok', 'a new kazoo queue object puts into d6 again');
is(sqlB(q{SELECT body FROM zk_try_dequeue('d6')}), 'k2', 'and SQL dequeues it');
$kz2->cmd('quit');

zkq($zk, 'create', "$Q/d7/entries");
zkq($zk, 'create', "$Q/d7/taken");
zkq($zk, 'create', "$Q/d7/foreign-child");
refused($A, 'd7', 'because its node has children zklock does not create', "another client's child");
zkq($zk, 'delete', "$Q/d7/foreign-child");
is(sqlA(q{SELECT zk_queue_drop('d7')}), 't', 'without it, d7 is dropped');

# ---- privileges and namespaces ----
sqlA(q{CREATE ROLE plain LOGIN; CREATE ROLE eater LOGIN; CREATE ROLE keeper LOGIN;
	SELECT zk_grant('consume', 'eater'); SELECT zk_grant('admin', 'keeper');});
is(sqlA(q{SELECT has_function_privilege('public', 'zk_queue_drop(text)', 'EXECUTE')}), 'f',
	'PUBLIC may not execute zk_queue_drop');
is(sqlA(q{SELECT string_agg(group_name, ',') FROM zk_privilege_groups() WHERE object LIKE '%.zk\_queue\_drop(text)'}),
	'admin', 'zk_queue_drop is in the admin group');
sqlA(q{SELECT zk_enqueue('d8', 'z')});
sqlA(q{SELECT count(*) FROM zk_try_dequeue('d8')});
ok(wait_until(sub { nodes('d8') == 4 }, 10), 'd8 empty');
($st) = try_sql($A, q{SELECT zk_queue_drop('d8')}, '-U', 'plain');
is($st, '42501', 'a role without grants: 42501');
($st) = try_sql($A, q{SELECT zk_queue_drop('d8')}, '-U', 'eater');
is($st, '42501', 'a role with the consume group only: 42501');
is(nodes('d8'), 4, '... d8 untouched');
($st, $out) = try_sql($A, q{SELECT zk_queue_drop('d8')}, '-U', 'keeper');
is("$st:$out", '00000:t', 'a role with the admin group drops it');
is(nodes('d8'), 0, 'd8: nothing left');

sqlA(q{SELECT zk_enqueue('dns', 'root')});
sqlA(q{SET zklock.namespace = 'ns1'; SELECT zk_enqueue('dns', 'ns');});
sqlA(q{SET zklock.namespace = 'ns1'; SELECT count(*) FROM zk_try_dequeue('dns');});
ok(wait_until(sub { nodes('ns1:dns') == 4 }, 10), "ns1's dns is empty");
is(sqlA(q{SET zklock.namespace = 'ns1'; SELECT zk_queue_drop('dns');}), 't',
	'a drop in namespace ns1');
is(nodes('ns1:dns'), 0, "ns1's dns is gone");
is(sqlA(q{SELECT body FROM zk_try_dequeue('dns')}), 'root',
	"the root namespace's dns kept its item");

# ---- across clusters: B remembers the parents, A drops ----
sqlB(q{SELECT zk_enqueue('x1', 'before')});
is(sqlB(q{SELECT body FROM zk_try_dequeue('x1')}), 'before', 'B used x1 (enqueue and dequeue)');
ok(wait_until(sub { nodes('x1') == 4 }, 10), 'x1 is empty');
is(sqlA(q{SELECT zk_queue_drop('x1')}), 't', 'A drops x1');
($st, $out, $err) = try_sql($B, q{SELECT zk_enqueue('x1', 'after')});
is($st, '00000', 'B enqueues into x1 again');
unlike($err, qr/WARNING/, "B's COMMIT has no warning") or diag $err;
is(sqlA(q{SELECT string_agg(body, ',') FROM zk_dequeue('x1', '10s', 10)}), 'after',
	'the item arrives, once');
ok(wait_until(sub { nodes('x1') == 4 }, 10), 'x1 is there again, empty');
is(sqlB(q{SELECT count(*) FROM zk_try_dequeue('x1', 10)}), '0', 'nothing more in x1');

# a consumer waiting on B while A drops (A cannot see it)
sqlB(q{SELECT zk_enqueue('x2', 'one')});
is(sqlB(q{SELECT body FROM zk_try_dequeue('x2')}), 'one', 'B used x2');
my $bwait = new_session($B, name => 'bwait');
$bwait->send(q{SELECT body FROM zk_dequeue('x2', '60s')});
ok(wait_until(sub { sqlB(q{SELECT local_waiting FROM zk_queues WHERE queue = 'x2'}) eq '1' }, 10),
	'a consumer waits on x2 on B');
ok(wait_until(sub { nodes('x2') == 4 }, 10), 'x2 is empty');
is(sqlA(q{SELECT zk_queue_drop('x2')}), 't', 'A drops x2');
sleep 1;
sqlA(q{SELECT zk_enqueue('x2', 'two')});
$r = $bwait->wait(30);
is("$r->{sqlstate}:$r->{out}", '00000:two', "B's waiter is served by an item enqueued after the drop");

# ---- 3,000 queues from one COMMIT: consumed, dropped, nothing left ----
my $N = 3000;
my $t0 = time();
sqlA(qq{SELECT count(zk_enqueue('many-' || i, 'm' || i)) FROM generate_series(1, $N) i});
my $q_listed = grep { /^many-/ } zk_children($zk, $Q);
is($q_listed, $N, "one COMMIT created $N queues");
my $consumed = 0;
for (my $i = 1; $i <= $N; $i += 200)
{
	my $j = $i + 199;
	$consumed += sqlA(qq{SELECT count(*) FROM generate_series($i, $j) i,
		LATERAL zk_try_dequeue('many-' || i) m WHERE m.body = 'm' || i});
}
is($consumed, $N, "each of the $N items consumed once");
my $t1 = time();
is(sqlA(qq{SELECT count(*) FILTER (WHERE zk_queue_drop('many-' || i)) FROM generate_series(1, $N) i}),
	$N, "the $N queues dropped");
my $dt = time() - $t1;
$q_listed = grep { /^many-/ } zk_children($zk, $Q);
is($q_listed, 0, 'no node of them left under the queues');
my ($rc, $tree) = zkq($zk, 'tree', $Q);
is(scalar(grep { m{^\Q$Q\E/many-} } split /\n/, $tree), 0, 'zero nodes of them in the tree');
note sprintf('%d queues: created and consumed in %.1f s, dropped in %.1f s (%.0f drops/s)',
	$N, $t1 - $t0, $dt, $N / ($dt || 1));
# a state is forgotten at the second sweep (every 10 s) that finds it unused
ok(wait_until(sub { zk_status_value($A, 'queues_tracked') <= 2 }, 45, 0.2),
	"A's worker forgot them (queues_tracked " . zk_status_value($A, 'queues_tracked') . ')');

# ---- a race: B produces and consumes, A drops again and again ----
my $NR = 300;
sqlB(q{CREATE TABLE got (body text)});
sqlB(qq{CREATE PROCEDURE consume_race(n int) LANGUAGE plpgsql AS \$\$
DECLARE
  idle int := 0;
  k int;
BEGIN
  WHILE (SELECT count(*) FROM got) < n AND idle < 20 LOOP
    INSERT INTO got SELECT body FROM zk_dequeue('race', '1s', 10);
    GET DIAGNOSTICS k = ROW_COUNT;
    idle := CASE WHEN k = 0 THEN idle + 1 ELSE 0 END;
    COMMIT;
  END LOOP;
END \$\$});
sqlA(q{CREATE FUNCTION drop_race(secs float8) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := clock_timestamp();
  dropped int := 0;
  absent int := 0;
  busy int := 0;
BEGIN
  WHILE clock_timestamp() < t0 + make_interval(secs => secs) LOOP
    BEGIN
      IF zk_queue_drop('race') THEN dropped := dropped + 1; ELSE absent := absent + 1; END IF;
    EXCEPTION WHEN object_in_use THEN busy := busy + 1;
    END;
  END LOOP;
  RETURN dropped || ' ' || absent || ' ' || busy;
END $$});
my $consumer = new_session($B, name => 'consumer');
$consumer->send(qq{CALL consume_race($NR)});
my $producer = new_session($B, name => 'producer');
# one item every 10 ms or so, for about as long as the drops go on
$producer->send(join("\n", map { "SELECT zk_enqueue('race', 'r$_'), pg_sleep(0.01);" } 1 .. $NR));
my $dropper = new_session($A, name => 'dropper');
$dropper->send(q{SELECT drop_race(4)});
my $rp = $producer->wait(120);
my $rd = $dropper->wait(60);
is($rp->{sqlstate}, '00000', "B's producer committed $NR items");
is($rd->{sqlstate}, '00000', "A's drops were refused only with 55006") or diag $rd->{err};
my ($dropped, $absent, $busy) = split / /, $rd->{out} // '0 0 0';
my $warnings = () = ($rp->{err} // '') =~ /WARNING/g;
my $rc2 = $consumer->wait(120);
is($rc2->{sqlstate}, '00000', "B's consumer ended") or diag $rc2->{err};
my $left = sqlA(q{SELECT count(*) FROM zk_try_dequeue('race', 1000)});
is(sqlB(q{SELECT count(*) || '/' || count(DISTINCT body) FROM got}) . "+$left", "$NR/$NR+0",
	"every item produced was consumed exactly once ($NR items)");
is(sqlB(qq{SELECT count(*) FROM generate_series(1, $NR) i WHERE NOT EXISTS (SELECT FROM got WHERE body = 'r' || i)}),
	'0', 'none lost');
note "race: $dropped drops, $absent found nothing, $busy refused; producer warnings: $warnings";
is($warnings, 0, "B's COMMITs had no warning") or diag $rp->{err};

# then a consumer waits on B while A drops again and again: each drop
# deletes the nodes under its watch, it lists, finds them gone and creates
# them again; afterwards it is served all the same
my $racewait = new_session($B, name => 'racewait');
$racewait->send(q{SELECT body FROM zk_dequeue('race', '60s')});
ok(wait_until(sub { sqlB(q{SELECT count(*) FROM zk_queues WHERE queue = 'race' AND local_waiting = 1}) eq '1' }, 10),
	'a consumer waits on B');
my ($d2, $a2, $b2) = split / /, $dropper->query_safe(q{SELECT drop_race(2)});
note "race: while B's consumer waited: $d2 drops, $a2 found nothing, $b2 refused";
$dropped += $d2;
ok($dropped > 0, "A dropped the queue while B used it ($dropped drops)");
ok($d2 > 0, "... also while B's consumer waited ($d2 drops, B created it again each time)");
sqlA(q{SELECT zk_enqueue('race', 'r-last')});
$r = $racewait->wait(30);
is("$r->{sqlstate}:$r->{out}", '00000:r-last', "B's consumer is then served the item A enqueued");
ok(wait_until(sub { zk_count($zk, "$Q/race/entries") == 0 && zk_count($zk, "$Q/race/taken") == 0 }, 10),
	'nothing left in the queue');

$_->quit foreach ($holder, $bholder, $waiter, $bwait, $consumer, $producer, $dropper, $racewait);
$kz->cmd('quit');
$A->stop;
$B->stop;
zk_stop($zk);
done_testing();
