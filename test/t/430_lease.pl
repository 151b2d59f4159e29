
# 430_lease.pl - zk_try_lease across two PostgreSQL clusters A and B and
# kazoo's own NonBlockingLease, on one ZooKeeper, checked through ZooKeeper.
#
#   1. Once per period: A takes 'job' for 4 s; B and kazoo are refused
#      while it lasts, A renews it; once it ended, B takes it and A is
#      refused.  The holder node has kazoo's data format.
#   2. A lease kazoo took is respected by SQL until its end, and a holder
#      identifier with non-ASCII characters (which kazoo writes as \u
#      escapes) is the same holder on both sides.
#   3. Concurrent callers on A and B, each its own holder: exactly one wins
#      each name.
#   4. kazoo holding the lease's lock: zk_try_lease waits, and with
#      lock_timeout fails with 55P03; a backend terminated while it waits
#      leaves no lock node.
#   5. Garbage in the holder node: a clear error (XX001) that changes
#      nothing and leaves no lock node behind.
#   6. ZooKeeper frozen while a lease is decided: an error within
#      zklock.connect_timeout; after the thaw the lease is taken or not,
#      never half, and no lock node is left.
#   7. Lost replies (B talks to ZooKeeper through test/zkproxy.py): the
#      connection cut right after the lease's write reached ZooKeeper (the
#      reply lost): the write is settled by reading again, true, once; the
#      write never forwarded (its reply never comes): an error within
#      zklock.connect_timeout, nothing taken, no lock node left.
#   8. Bad input creates nothing.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $zk_ref;
END { zk_thaw($zk_ref) if $zk_ref && $zk_ref->{frozen}; }

my $T0 = time();
my $zk = zk_start();
$zk_ref = $zk;
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('leaseA', $zk, %opts);
my $pB = proxy_start($zk);
my $B = zk_node('leaseB', $pB->{hosts}, %opts);
my %node = (A => $A, B => $B);
my $LEASES = '/zklock/leases';

sub sql
{
	my ($n, $sql) = @_;
	return $n->safe_psql('postgres', $sql);
}

sub kazoo_lease_client { return kazoo_driver($zk, 'lease_kazoo.py'); }

# the lock nodes under a lease (everything but lease_holder)
sub lock_nodes
{
	my ($name) = @_;
	return scalar(grep { $_ ne 'lease_holder' } zk_children($zk, "$LEASES/$name"));
}

my $k = kazoo_lease_client();

#
# 1. once per period
#
is(sql($A, "SELECT zk_try_lease('job', '4 seconds')"), 't', 'A takes job for 4 s');
my $t_taken = time();
is(sql($B, "SELECT zk_try_lease('job', '4 seconds')"), 'f', 'B is refused');
is($k->cmd("lease $LEASES/job 4 py"), 'false', 'kazoo is refused');
is(sql($A, "SELECT zk_try_lease('job', '4 seconds')"), 't', 'A renews it');
my $data = zk_get($zk, "$LEASES/job/lease_holder");
my $j = eval { decode_json($data) } // {};
is($j->{version}, 1, 'the holder node: kazoo format, version 1');
like($j->{end} // '', qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/, 'end: YYYY-MM-DDTHH:MM:SS');
my $holderA = sql($A, "SELECT holder FROM zk_lease_holder('job')");
is($j->{holder}, $holderA, "holder: A's default holder ($holderA)");
my $sysA = sql($A, 'SELECT system_identifier FROM pg_control_system()');
like($holderA, qr{/\Q$sysA\E$}, "A's default holder names its system identifier");
is(sql($A, "SELECT this_server::text || expired::text FROM zk_lease_holder('job')"), 'truefalse',
	'zk_lease_holder on A: this server, not expired');
is(sql($B, "SELECT this_server::text || expired::text FROM zk_lease_holder('job')"), 'falsefalse',
	'zk_lease_holder on B: another server');
is(lock_nodes('job'), 0, 'no lock node left');
my $wait = 5.2 - (time() - $t_taken);
sleep $wait if $wait > 0;
is(sql($B, "SELECT expired FROM zk_lease_holder('job')"), 't', 'after its end: expired');
is(sql($B, "SELECT zk_try_lease('job', '4 seconds')"), 't', 'B takes it once it ended');
is(sql($A, "SELECT zk_try_lease('job', '4 seconds')"), 'f', 'A is refused now');

#
# 2. kazoo's lease, and non-ASCII holders
#
is($k->cmd("lease $LEASES/kjob 3 py-%C3%9Cberweisung"), 'true', 'kazoo takes kjob for 3 s as "py-Überweisung"');
like(zk_get($zk, "$LEASES/kjob/lease_holder"), qr/\\u00dc/, 'kazoo wrote the holder with a \u escape');
is(sql($A, "SELECT zk_try_lease('kjob', '3 seconds')"), 'f', "A respects kazoo's lease");
is(sql($A, "SELECT holder FROM zk_lease_holder('kjob')"), 'py-Überweisung', 'zk_lease_holder decodes it');
is(sql($A, "SELECT zk_try_lease('kjob', '3 seconds', 'py-Überweisung')"), 't',
	'the same holder in SQL renews it');
is($k->cmd("lease $LEASES/kjob 3 py-%C3%9Cberweisung"), 'true', 'and kazoo, same holder, renews it back');
is($k->cmd("lease $LEASES/kjob 3 other"), 'false', 'another kazoo holder is refused');
is(lock_nodes('kjob'), 0, 'no lock node left');

#
# 3. concurrent callers: one winner per name
#
my @s;
foreach my $c (qw(A B))
{
	push @s, map { [ $c, new_session($node{$c}, name => "race_${c}_$_") ] } 1 .. 3;
}
my @bad;
foreach my $round (1 .. 8)
{
	my $i = 0;
	$_->[1]->send("SELECT zk_try_lease('race$round', '1 hour', 'h" . $i++ . "')") foreach @s;
	my @won;
	foreach my $x (@s)
	{
		my $r = $x->[1]->wait(30);
		push @bad, "round $round $x->[0]: $r->{sqlstate} $r->{err}" if $r->{sqlstate} ne '00000';
		push @won, $x->[1]->name if ($r->{out} // '') eq 't';
	}
	push @bad, "round $round: winners @won" if @won != 1;
}
is(join('; ', @bad), '', 'eight rounds of six concurrent callers: exactly one winner each');
$_->[1]->quit foreach @s;

#
# 4. kazoo holds the lease's lock
#
is($k->cmd("lock $LEASES/held"), 'locked', "kazoo takes held's lock");
my $r = one_shot($A, "SET lock_timeout = '1s'; SELECT zk_try_lease('held', '1 minute')", 30);
is($r->{sqlstate}, '55P03', 'zk_try_lease with lock_timeout 1s: 55P03') or diag $r->{err};
my $w = new_session($A, name => 'held_wait');
$w->send("SELECT zk_try_lease('held', '1 minute')");
ok(wait_until(sub { lock_nodes('held') == 2 }, 10, 0.1), 'a waiting zk_try_lease has its lock node');
$A->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $w->pid . ')');
ok(wait_until(sub { lock_nodes('held') == 1 }, 10, 0.1), 'terminated: its lock node is gone');
$w->quit;
$w = new_session($A, name => 'held_wait2');
$w->send("SELECT zk_try_lease('held', '1 minute')");
ok(wait_until(sub { lock_nodes('held') == 2 }, 10, 0.1), 'another waits');
is($k->cmd('unlock'), 'unlocked', 'kazoo lets go');
$r = $w->wait(15);
is($r->{out}, 't', 'the waiter takes the lease') or diag $r->{err};
$w->quit;
is(lock_nodes('held'), 0, 'no lock node left');

#
# 5. garbage in the holder node
#
zkq($zk, 'create', "$LEASES/garbage/lease_holder", 'not json');
$r = one_shot($A, "SELECT zk_try_lease('garbage', '1 minute')", 30);
is($r->{sqlstate}, 'XX001', 'garbage: XX001') or diag $r->{err};
like($r->{err}, qr/holds data zklock cannot read/, 'with a clear message');
is(zk_get($zk, "$LEASES/garbage/lease_holder"), 'not json', 'the node is unchanged');
is(lock_nodes('garbage'), 0, 'no lock node left');
zkq($zk, 'delete', "$LEASES/garbage/lease_holder");
zkq($zk, 'create', "$LEASES/garbage/lease_holder", '{"version": 1, "holder": "x", "end": "soon"}');
$r = one_shot($A, "SELECT zk_try_lease('garbage', '1 minute')", 30);
is($r->{sqlstate}, 'XX001', 'an end that is not a time: XX001') or diag $r->{err};
zkq($zk, 'delete', "$LEASES/garbage/lease_holder");
zkq($zk, 'create', "$LEASES/garbage/lease_holder", '{"version": 2, "holder": "x", "end": "2000-01-01T00:00:00"}');
is(sql($A, "SELECT zk_try_lease('garbage', '1 minute')"), 'f', 'another format version: refused, left alone');
is(zk_get($zk, "$LEASES/garbage/lease_holder"), '{"version": 2, "holder": "x", "end": "2000-01-01T00:00:00"}',
	'unchanged');

#
# 6. ZooKeeper frozen while a lease is decided
#
my $f = new_session($A, name => 'frozen');
zk_freeze($zk);
my $t = time();
$f->send("SELECT zk_try_lease('frozen', '1 minute')");
$r = $f->wait(30);
my $took = time() - $t;
zk_thaw($zk);
is($r->{sqlstate}, '08006', 'frozen ZooKeeper: 08006') or diag $r->{err};
ok($took < 15, sprintf('within connect_timeout and a margin (%.1f s)', $took));
ok(wait_until(sub { zk_status_value($A, 'state') eq 'connected' }, 30, 0.2), 'A reconnects after the thaw');
ok(wait_until(sub { lock_nodes('frozen') == 0 }, 20, 0.2), 'no lock node left after the thaw');
$r = $f->query("SELECT zk_try_lease('frozen', '1 minute')");
is($r->{out}, 't', 'A takes it afterwards (it was never half taken by another)') or diag $r->{err};
$f->quit;

#
# 7. lost replies on B
#
my $rule = proxy_rule($pB, 'cut-after-request multi');
$r = one_shot($B, "SELECT zk_try_lease('doubt', '1 minute', 'in doubt')", 60);
ok(proxy_wait_fired($pB, $rule, 10), 'the connection was cut after the write reached ZooKeeper');
is($r->{out}, 't', 'the write whose reply was lost: settled by reading again, true') or diag $r->{err};
is((eval { decode_json(zk_get($zk, "$LEASES/doubt/lease_holder")) } // {})->{holder}, 'in doubt',
	'ZooKeeper: the holder is B\'s');
is(lock_nodes('doubt'), 0, 'no lock node left');
is(sql($A, "SELECT zk_try_lease('doubt', '1 minute')"), 'f', 'A is refused');
$rule = proxy_rule($pB, 'drop-requests multi');
$t = time();
$r = one_shot($B, "SELECT zk_try_lease('unsent', '1 minute', 'never')", 60);
$took = time() - $t;
is($r->{sqlstate}, '08006', 'the write never forwarded: 08006') or diag $r->{err};
ok($took < 15, sprintf('within connect_timeout and a margin (%.1f s)', $took));
proxy_cmd($pB, "clear $rule");
ok(!zk_exists($zk, "$LEASES/unsent/lease_holder"), 'nothing was taken');
ok(wait_until(sub { lock_nodes('unsent') == 0 }, 10, 0.2), 'no lock node left');
is(sql($A, "SELECT zk_try_lease('unsent', '1 minute')"), 't', 'A takes it');

#
# 8. bad input
#
my %before = map { $_ => 1 } zk_children($zk, $LEASES);
foreach my $b (
	[ '22004', "SELECT zk_try_lease(NULL, '1 minute')" ],
	[ '22004', "SELECT zk_try_lease('bad', NULL)" ],
	[ '22023', "SELECT zk_try_lease('', '1 minute')" ],
	[ '22023', "SELECT zk_try_lease(repeat('x', 256), '1 minute')" ],
	[ '22023', "SELECT zk_try_lease('bad', '0')" ],
	[ '22023', "SELECT zk_try_lease('bad', '-1 minute')" ],
	[ '22023', "SELECT zk_try_lease('bad', '999 milliseconds')" ],
	[ '22023', "SELECT zk_try_lease('bad', '101 years')" ],
	[ '22023', "SELECT zk_try_lease('bad', '1 minute', '')" ],
	[ '22023', "SELECT zk_try_lease('bad', '1 minute', repeat('h', 256))" ])
{
	$r = one_shot($B, $b->[1], 30);
	is($r->{sqlstate}, $b->[0], "$b->[1]: $b->[0]") or diag $r->{err};
}
my @new = grep { !$before{$_} } zk_children($zk, $LEASES);
is(join(' ', @new), '', 'bad input created nothing');
foreach my $c (qw(A B))
{
	ok(wait_until(sub { zk_status_value($node{$c}, 'entries_used') eq '0' }, 5, 0.1),
		"$c: no shared-memory entry left");
}

$k->quit;
$_->stop('fast') foreach ($A, $B);
proxy_stop($pB);
zk_stop($zk);
note sprintf('430_lease: %.1fs', time() - $T0);
done_testing();
