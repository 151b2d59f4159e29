
# 993_edges.pl - hostile review (breaker): bounds at exactly the limit, long
# names with escapable characters in a long namespace, savepoints, 2PC,
# arrivals at max_children.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('brk4', $zk, namespace => undef,
	conf => "max_prepared_transactions = 5\nzklock.max_children = 10\n");
my $su = $A->safe_psql('postgres', 'SELECT current_user');

sub run
{
	my ($db, $sql, $user) = @_;
	return sqlstate_psql($A, $db, $sql, $user // $su, timeout => 120);
}
sub probe
{
	my ($tag, $sql, $user) = @_;
	my $r = run('postgres', $sql, $user // 'ten');
	my ($e) = $r->{err} =~ /ERROR:\s*(.*)/;
	note "$tag: $r->{sqlstate} out=[" . join(' | ', split /\n/, $r->{out}) . '] ' . ($e // '');
	return $r;
}

$A->safe_psql('postgres', q{
CREATE ROLE ten LOGIN;
SELECT zk_grant(g, 'ten') FROM unnest(ARRAY['lock','produce','consume','lease','semaphore','arrive','wait','monitor']) g;
});

# boundaries
my $r = probe('item 16384', "SELECT zk_enqueue('b', repeat('x', 16384)::bytea)");
is($r->{sqlstate}, '00000', 'an item of exactly max_item_size goes');
$r = probe('item 16385', "SELECT zk_enqueue('b', repeat('x', 16385)::bytea)");
is($r->{sqlstate}, '54000', 'one byte more: 54000');
probe('txn 16 x 16384', "BEGIN; SELECT count(zk_enqueue('b2', repeat('x', 16384)::bytea)) FROM generate_series(1,16); COMMIT");
probe('txn 15 x 16384 + long name', "BEGIN; SELECT count(zk_enqueue(repeat('n', 255), repeat('x', 16384)::bytea)) FROM generate_series(1,15); COMMIT");

# savepoints and 2PC
$r = probe('savepoint', "BEGIN; SAVEPOINT a; SELECT zk_enqueue('sp', 'rolled-back'); ROLLBACK TO a; SELECT zk_enqueue('sp', 'kept'); COMMIT; SELECT string_agg(body, ',') FROM zk_queue_peek('sp')");
like($r->{out}, qr/^kept$/m, 'savepoint: only the kept item is published');
$r = probe('2pc', "BEGIN; SELECT zk_enqueue('tp', 'prepared'); PREPARE TRANSACTION 'p1'");
note "2pc: entries in tp: " . zk_count($zk, '/zklock/queues/postgres:tp/entries');
probe('2pc commit', "COMMIT PREPARED 'p1'", $su);
note "2pc: entries in tp after COMMIT PREPARED: " . zk_count($zk, '/zklock/queues/postgres:tp/entries');
probe('2pc lock', "BEGIN; SELECT zk_lock('tl'); PREPARE TRANSACTION 'p2'");
probe('2pc rollback', "ROLLBACK PREPARED 'p2'", $su);

# long names with characters that are escaped, in a long namespace
my $ns = "repeat('é', 63)";
for my $call (
	"SELECT zk_enqueue(repeat('%', 255), 'x')",
	"SELECT zk_try_session_lock(repeat('/', 255))",
	"SELECT zk_try_session_lock(repeat('€', 85))",
	"SELECT zk_arrive(repeat('/', 255), repeat('/', 255))",
	"SELECT zk_try_lease(repeat('/', 255), '1 minute', repeat('%', 255))",
	"SELECT zk_try_session_semaphore(repeat('/', 255), 1)",
	"SELECT zk_gate_close(repeat('%', 255))")
{
	$r = probe("longns $call", "SELECT set_config('zklock.namespace', $ns, false); $call", $su);
	ok($r->{sqlstate} =~ /^(00000|22|54)/, "long names: $call answers or refuses cleanly ($r->{sqlstate})");
	$r = probe("longname $call", $call);
	ok($r->{sqlstate} =~ /^(00000|22|54)/, "long names (own ns): $call answers or refuses cleanly ($r->{sqlstate})");
}
is($A->safe_psql('postgres', "SELECT state FROM zk_status()"), 'connected', 'worker still connected');

# arrivals at max_children (10)
$r = probe('arr 10', "SELECT count(zk_arrive('ar', 'p' || i)) FROM generate_series(1, 10) i; SELECT count(*) FROM zk_arrivals('ar'); SELECT zk_await('ar', 10, '1s')");
is($r->{sqlstate}, '00000', 'arrivals: exactly max_children 10 are listed');
$r = probe('arr 11', "SELECT zk_arrive('ar', 'p11'); SELECT count(*) FROM zk_arrivals('ar')");
$r = probe('await 11', "SELECT zk_await('ar', 11, '1s')");
$r = probe('await 12', "SELECT zk_await('ar', 12, '1s')");
$r = probe('peek 11', "SELECT count(zk_enqueue('pk', 'i' || i)) FROM generate_series(1, 11) i; SELECT count(*) FROM zk_queue_peek('pk', 20); SELECT zk_queue_length('pk'); BEGIN; SELECT count(*) FROM zk_try_dequeue('pk', 20); COMMIT");

$A->stop;
zk_stop($zk);
done_testing();
