
# 354_queue_move.pl - zk_queue_move(from, to, max_items) (issue 38, "Dead
# letters"): unclaimed items moved to another queue, each exactly once,
# checked through ZooKeeper itself (kazoo).
#
# - Items of two priorities, bytea with zero bytes: all moved, the count
#   answered; in ZooKeeper the destination holds them under the same
#   priorities, byte for byte, and the source none; dequeued from the
#   destination in the same order.
# - max_items: only the first ones in queue order move.  An empty source
#   and a source that does not exist move 0.
# - A claimed item (a zk_dequeue in an open transaction) is not moved;
#   after ROLLBACK it is still in the source.
# - A dead letter (written with kazoo: the envelope, then the payload)
#   moved back gives the plain payload, in ZooKeeper and in zk_message
#   (origin NULL).
# - Two clusters moving the same queue at once: every item is moved
#   exactly once (the destination's nodes counted and read through
#   kazoo), the two counts add up.
# - A backend terminated in the middle of a move: every item is in exactly
#   one of the two queues, and the move's node under the source is gone.
# - Errors: NULL arguments 22004, the same queue 22023, max_items 0 22023,
#   a role without the admin group 42501; more items than
#   zklock.max_children 54000, nothing moved.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '5s');
my $A = zk_node('move_a', $zk, %opts);
my $B = zk_node('move_b', $zk, %opts);
my $Q = '/zklock/queues';

# items in ZooKeeper, through kazoo: [ name, payload as hex ] of each
# entry of queue $q, in queue order (name order)
sub items_in
{
	my ($q) = @_;
	my $py = <<'PY';
import sys, logging
logging.basicConfig(level=logging.CRITICAL)
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
z = KazooClient(hosts=sys.argv[1]); z.start(timeout=10)
p = sys.argv[2]
try:
    names = sorted(z.get_children(p))
except NoNodeError:
    names = []
asyncs = [(n, z.get_async(p + '/' + n)) for n in names]
for n, a in asyncs:
    print(n, a.get(timeout=30)[0].hex() or '-')
z.stop()
PY
	my ($out, $err);
	IPC::Run::run([ $ZkLockTest::PYTHON, '-c', $py, $zk->{hosts}, "$Q/$q/entries" ],
		'>', \$out, '2>', \$err) or die "kazoo read of $q failed: $err";
	return map { my ($n, $h) = split / /; [ $n, $h eq '-' ? '' : $h ] } split /\n/, $out;
}

# the payloads (hex) of queue $q in ZooKeeper, in queue order
sub payloads_in { return map { $_->[1] } items_in($_[0]); }

sub hex_of { return unpack('H*', $_[0]); }

# entry nodes of queue $q in ZooKeeper
sub entries { return zk_count($zk, "$Q/$_[0]/entries"); }

sub move
{
	my ($node, $from, $to, $n) = @_;
	return $node->safe_psql('postgres',
		"SELECT zk_queue_move('$from', '$to'" . (defined $n ? ", $n" : '') . ')');
}

#
# Items of two priorities, bytea with zero bytes
#
$A->safe_psql('postgres', q{
	SELECT zk_enqueue('m1', ARRAY['\x00'::bytea, '\x0001ff00'::bytea, 'plain'::bytea]);
	SELECT zk_enqueue('m1', ARRAY['\x00000000'::bytea, 'urgent'::bytea], 7);
	SELECT zk_enqueue('m1', ''::bytea);
});
ok(scalar(zk_wait_count($zk, "$Q/m1/entries", 6, 30)), 'six items are published');
my @before = items_in('m1');
is(move($A, 'm1', 'm1.dst'), '6', 'zk_queue_move answers 6');
is(entries('m1'), 0, 'the source has no entry left (ZooKeeper)');
is(zk_count($zk, "$Q/m1/taken"), 0, 'and no claim');
my @after = items_in('m1.dst');
is(scalar(@after), 6, 'the destination holds six entries (ZooKeeper)');
is_deeply([ map { substr($_->[0], 0, 10) } @after ], [ map { substr($_->[0], 0, 10) } @before ],
	'with the same priorities, in the same order');
is_deeply([ map { $_->[1] } @after ], [ map { $_->[1] } @before ],
	'and the same payloads, byte for byte');
is_deeply([ map { $_->[1] } @after ],
	[ '00000000', hex_of('urgent'), '00', '0001ff00', hex_of('plain'), '' ],
	'priority 7 first, each priority in enqueue order');
is($A->safe_psql('postgres',
	"SELECT string_agg(priority || ':' || encode(payload, 'hex'), ',' ORDER BY ord)
	   FROM zk_dequeue('m1.dst', '5s', 10) WITH ORDINALITY AS d(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, ord)"),
	'7:00000000,7:' . hex_of('urgent') . ',100:00,100:0001ff00,100:' . hex_of('plain') . ',100:',
	'zk_dequeue hands them out from the destination in that order');
ok(scalar(zk_wait_count($zk, "$Q/m1.dst/entries", 0, 30)), 'and consumes them');

#
# max_items; an empty source; a source that does not exist
#
$A->safe_psql('postgres',
	"SELECT zk_enqueue('m2', array_agg('m2-' || i ORDER BY i)) FROM generate_series(1, 10) i");
ok(scalar(zk_wait_count($zk, "$Q/m2/entries", 10, 30)), 'ten items are published');
is(move($A, 'm2', 'm2.dst', 3), '3', 'max_items 3 moves 3');
is_deeply([ payloads_in('m2.dst') ], [ map { hex_of("m2-$_") } 1 .. 3 ],
	'the first three in queue order (ZooKeeper)');
is(entries('m2'), 7, 'seven stay in the source (ZooKeeper)');
is(move($A, 'm2', 'm2.dst'), '7', 'the default (1000) moves the rest');
is_deeply([ payloads_in('m2.dst') ], [ map { hex_of("m2-$_") } 1 .. 10 ],
	'all ten in the destination, in order');
is(move($A, 'm2', 'm2.dst'), '0', 'an empty source moves 0');
is(move($A, 'no_such_queue', 'm2.dst'), '0', 'a source that does not exist moves 0');
ok(!zk_exists($zk, "$Q/no_such_queue"), 'and is not made');
is(scalar(grep { /^purge-/ } split /\n/, zkq_or_die($zk, 'ls', "$Q/m2")), 0,
	"no move's node is left under the source");

#
# A claimed item is not moved
#
$A->safe_psql('postgres', "SELECT zk_enqueue('m3', ARRAY['c1', 'c2', 'c3'])");
ok(scalar(zk_wait_count($zk, "$Q/m3/entries", 3, 30)), 'three items are published');
my $S = new_session($A, name => 'claimer');
$S->query_safe('BEGIN');
is($S->query_safe("SELECT body FROM zk_dequeue('m3', '5s')"), 'c1', 'a session claims c1');
is(move($B, 'm3', 'm3.dst'), '2', 'a move (of the other cluster) moves the two others');
is_deeply([ payloads_in('m3.dst') ], [ hex_of('c2'), hex_of('c3') ], 'c2 and c3 (ZooKeeper)');
is_deeply([ payloads_in('m3') ], [ hex_of('c1') ], 'c1 stays in the source');
is(zk_count($zk, "$Q/m3/taken"), 1, 'still claimed');
$S->query_safe('ROLLBACK');
ok(scalar(zk_wait_count($zk, "$Q/m3/taken", 0, 30)), 'ROLLBACK lets the claim go');
is_deeply([ payloads_in('m3') ], [ hex_of('c1') ], 'c1 is still in the source');
is(move($A, 'm3', 'm3.dst'), '1', 'now it moves');
is_deeply([ payloads_in('m3.dst') ], [ map { hex_of($_) } qw(c2 c3 c1) ], 'behind the others');

#
# A dead letter moved back
#
my $env = "\0zklock-dead-letter\1" . pack('N', 3) . pack('Q>', 4611686018427388000)
  . pack('n', length('orig')) . 'orig' . "back\0home";
{
	my $py = <<'PY';
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create(sys.argv[2] + '/entries/entry-100-', bytes.fromhex(sys.argv[3]), sequence=True,
         makepath=True)
z.stop()
PY
	my ($out, $err);
	IPC::Run::run([ $ZkLockTest::PYTHON, '-c', $py, $zk->{hosts}, "$Q/orig.dlq", hex_of($env) ],
		'>', \$out, '2>', \$err) or die "kazoo create failed: $err";
}
is($A->safe_psql('postgres',
	"SELECT origin || ':' || origin_attempts || ':' || encode(payload, 'hex') FROM zk_queue_peek('orig.dlq')"),
	'orig:3:' . hex_of("back\0home"), 'the dead letter shows its origin');
is(move($A, 'orig.dlq', 'orig'), '1', 'moved back');
is_deeply([ payloads_in('orig') ], [ hex_of("back\0home") ],
	'in ZooKeeper the item holds the plain payload, without the header');
is($A->safe_psql('postgres',
	"SELECT coalesce(origin, 'null') || ':' || encode(payload, 'hex') FROM zk_dequeue('orig', '5s')"),
	'null:' . hex_of("back\0home"), 'zk_message: the payload, origin NULL');

#
# Two clusters move the same queue at once
#
for my $k (0 .. 1)
{
	$A->safe_psql('postgres',
		"SELECT zk_enqueue('m4', array_agg('m4-' || lpad(i::text, 4, '0') ORDER BY i))"
		  . " FROM generate_series($k * 1000 + 1, $k * 1000 + 1000) i");
}
ok(scalar(zk_wait_count($zk, "$Q/m4/entries", 2000, 60)), '2,000 items are published');
my $ma = new_session($A, name => 'mover_a');
my $mb = new_session($B, name => 'mover_b');
$ma->send("SELECT zk_queue_move('m4', 'm4.dst', 10000)");
$mb->send("SELECT zk_queue_move('m4', 'm4.dst', 10000)");
my $ra = $ma->wait(120);
my $rb = $mb->wait(120);
ok($ra->{done} && $ra->{sqlstate} eq '00000', "A's move ends") or diag explain $ra;
ok($rb->{done} && $rb->{sqlstate} eq '00000', "B's move ends") or diag explain $rb;
note "A moved $ra->{out}, B moved $rb->{out}";
is($ra->{out} + $rb->{out}, 2000, 'their counts add up to 2,000');
is(entries('m4'), 0, 'the source is empty (ZooKeeper)');
my @moved = payloads_in('m4.dst');
is(scalar(@moved), 2000, 'the destination holds 2,000 entries (ZooKeeper)');
my %seen;
$seen{$_}++ foreach @moved;
is(scalar(keys %seen), 2000, 'each item exactly once');
is(scalar(grep { !$seen{hex_of(sprintf('m4-%04d', $_))} } 1 .. 2000), 0, 'none lost');

#
# A backend terminated in the middle of a move
#
for my $k (0 .. 4)
{
	$A->safe_psql('postgres',
		"SELECT zk_enqueue('m5', array_agg('m5-' || lpad(i::text, 4, '0') || repeat('x', 100) ORDER BY i))"
		  . " FROM generate_series($k * 1000 + 1, $k * 1000 + 1000) i");
}
ok(scalar(zk_wait_count($zk, "$Q/m5/entries", 5000, 60)), '5,000 items are published');
my $T = new_session($A, name => 'terminated');
$T->send("SELECT zk_queue_move('m5', 'm5.dst', 10000)");
my $started = wait_until(sub {
	my $n = $B->safe_psql('postgres', "SELECT zk_queue_length('m5.dst')");
	return $n > 0;
}, 60);
my $mid = $B->safe_psql('postgres', "SELECT zk_queue_length('m5.dst')");
note "terminating the move after $mid items";
ok($started, 'the move has begun');
$A->safe_psql('postgres', "SELECT pg_terminate_backend($T->{pid})");
# the worker ends what it sent, then deletes its node under the source
ok(wait_until(sub {
	!grep { /^purge-/ } split /\n/, zkq_or_die($zk, 'ls', "$Q/m5");
}, 60), "the move's node under the source goes");
my @src = payloads_in('m5');
my @dst = payloads_in('m5.dst');
note scalar(@src) . ' in the source, ' . scalar(@dst) . ' in the destination';
is(scalar(@src) + scalar(@dst), 5000, 'the two queues hold 5,000 items (ZooKeeper)');
%seen = ();
$seen{$_}++ foreach (@src, @dst);
is(scalar(keys %seen), 5000, 'each of them in exactly one');
is(zk_count($zk, "$Q/m5/taken"), 0, 'no claim left');
is(move($A, 'm5', 'm5.dst', 10000), scalar(@src), 'a second call moves the rest');
is(entries('m5.dst'), 5000, 'all 5,000 in the destination');

#
# Errors
#
my $su = $A->safe_psql('postgres', 'SELECT current_user');
sub sqlstate_of
{
	my ($sql, $user) = @_;
	return sqlstate_psql($A, 'postgres', $sql, $user // $su)->{sqlstate};
}

# more items than zklock.max_children: refused (counted, never listed),
# nothing moved
$A->safe_psql('postgres',
	"SELECT zk_enqueue('m6', array_agg('m6-' || i ORDER BY i)) FROM generate_series(1, 12) i");
ok(scalar(zk_wait_count($zk, "$Q/m6/entries", 12, 30)), 'twelve items are published');
$A->safe_psql('postgres', 'ALTER SYSTEM SET zklock.max_children = 10; SELECT pg_reload_conf()');
ok(wait_until(sub {
	sqlstate_of("SELECT zk_queue_move('m6', 'm6.dst')") eq '54000';
}, 30), 'more items than zklock.max_children: 54000');
like(sqlstate_psql($A, 'postgres', "SELECT zk_queue_move('m6', 'm6.dst')", $su)->{err},
	qr/zklock\.max_children/, 'the message names the setting');
is(entries('m6'), 12, 'nothing moved');
ok(!zk_exists($zk, "$Q/m6.dst"), 'the destination is not made');
$A->safe_psql('postgres', 'ALTER SYSTEM RESET zklock.max_children; SELECT pg_reload_conf()');
ok(wait_until(sub {
	sqlstate_of("SELECT zk_queue_move('m6', 'm6.dst', 5)") eq '00000';
}, 30), 'within the bound again it moves');
is(entries('m6.dst'), 5, 'five of them');
is(sqlstate_of("SELECT zk_queue_move(NULL, 'x')"), '22004', 'NULL from_queue: 22004');
is(sqlstate_of("SELECT zk_queue_move('x', NULL)"), '22004', 'NULL to_queue: 22004');
is(sqlstate_of("SELECT zk_queue_move('x', 'y', NULL)"), '22004', 'NULL max_items: 22004');
is(sqlstate_of("SELECT zk_queue_move('x', 'x')"), '22023', 'the same queue: 22023');
is(sqlstate_of("SELECT zk_queue_move('x', 'y', 0)"), '22023', 'max_items 0: 22023');
is(sqlstate_of("SELECT zk_queue_move('x', 'y', 10001)"), '22023', 'max_items 10001: 22023');
$A->safe_psql('postgres', 'CREATE ROLE nobody_much LOGIN');
is(sqlstate_of("SELECT zk_queue_move('m5.dst', 'y')", 'nobody_much'), '42501',
	'a role without the admin group: 42501');
is(entries('m5.dst'), 5000, 'nothing moved by the refused calls');

$_->quit foreach ($S, $ma, $mb);
$A->stop;
$B->stop;
done_testing();
