
# 400_barrier.pl - the double barrier across three PostgreSQL clusters A, B
# and C (three system identifiers) and kazoo's own DoubleBarrier members, on
# one ZooKeeper, checked through ZooKeeper itself.
#
#   1. Five parties: a kazoo member, SQL members on A, B and C, then a
#      second kazoo member.  Nobody passes while four are in (no ready node
#      yet, every SQL statement still waits, kazoo has not entered); the
#      fifth opens it for all of them, SQL and kazoo alike.  ZooKeeper then
#      holds five ephemeral members and one ready node.  Membership outlasts
#      the entering statement and its transactions.
#   2. Leave ordering: A, B and the first kazoo member leave, then C; none
#      of them returns while the second kazoo member is still in; the ready
#      node goes with the first leave; once the last one leaves, everybody
#      returns and no child is left.
#   3. A ready node left from an earlier round (persistent, as kazoo leaves
#      it) is not a member and does not open the barrier: one SQL member of
#      two times out and is withdrawn; two members open it and the ready
#      node is a new one.
#   4. Members that time out, are cancelled or whose backend is terminated
#      are withdrawn: a kazoo member that then waits for four does not
#      pass on their account; three new SQL members open it.
#   5. A member whose backend is terminated inside the barrier is gone,
#      and the others' leave does not wait for it.
#   6. Waiting costs two watches per barrier per cluster (its children and
#      its "ready" node): four waiters on A add two ZooKeeper watches, four
#      more on B two more; when they are cancelled the watches go.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $T0 = time();
my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('barA', $zk, %opts);
my $B = zk_node('barB', $zk, %opts);
my $C = zk_node('barC', $zk, %opts);
my %node = (A => $A, B => $B, C => $C);

my $BAR = '/zklock/barriers';

sub sql { return $_[0]->safe_psql('postgres', $_[1]); }

my %sysid = map { $_ => sql($node{$_}, 'SELECT system_identifier FROM pg_control_system()') } qw(A B C);
is(scalar(keys %{ { reverse %sysid } }), 3, 'three clusters, three system identifiers');

# a kazoo DoubleBarrier member of $name for $parties (test/barrier_kazoo.py)
sub kazoo_member
{
	my ($name, $parties) = @_;
	return kazoo_driver($zk, 'barrier_kazoo.py', "$BAR/$name", $parties);
}

# the children of a barrier as { name => ephemeral owner }, dies when
# ZooKeeper cannot be asked
sub members { return zk_owners($zk, "$BAR/$_[0]"); }

# number of members (ready excluded), and whether ready is there
sub census
{
	my ($name) = @_;
	my %m = members($name);
	my $ready = exists $m{ready} ? 1 : 0;
	delete $m{ready};
	return (scalar(keys %m), $ready);
}

sub wait_census
{
	my ($name, $n, $ready, $secs) = @_;
	my @c;
	wait_until(sub { @c = census($name); $c[0] == $n && (!defined $ready || $c[1] == $ready) }, $secs // 10, 0.1);
	return "$c[0]/$c[1]";
}

# send $sql in session $s and wait until its backend runs it
sub start_waiting
{
	my ($n, $s, $sql) = @_;
	$s->send($sql);
	return wait_for_backend_active($n, $s->pid, '%zk_barrier%', 30);
}

sub finish { return $_[0]->wait_or_kill($_[1]); }

#
# 1. five parties: kazoo, A, B, C, kazoo
#
my $k1 = kazoo_member('etl-sync', 5);
my $k2 = kazoo_member('etl-sync', 5);
is($k1->cmd('enter'), 'entering', 'kazoo member 1 enters');
is(wait_census('etl-sync', 1, 0), '1/0', 'ZooKeeper: one member (kazoo), no ready');
my %s;
foreach my $c (qw(A B C))
{
	$s{$c} = new_session($node{$c}, name => "member_$c");
	ok(start_waiting($node{$c}, $s{$c}, "SELECT zk_barrier_enter('etl-sync', 5, '60s')"),
		"$c: zk_barrier_enter waits");
}
is(wait_census('etl-sync', 4, 0), '4/0', 'ZooKeeper: four members, no ready');
sleep 1;
ok(($s{A}->running && $s{B}->running && $s{C}->running), 'with four of five in, A, B and C still wait');
is($k1->read_line(0.2), undef, 'and kazoo member 1 has not entered');
is(join('/', census('etl-sync')), '4/0', 'still no ready node');

my $t = time();
is($k2->cmd('enter'), 'entering', 'kazoo member 2 enters');
foreach my $c (qw(A B C))
{
	my $r = finish($s{$c}, 20);
	is($r->{out}, 't', "$c: zk_barrier_enter returns true when the fifth enters") or diag $r->{err};
}
is($k1->read_line(20), 'entered', 'kazoo member 1 entered');
is($k2->read_line(20), 'entered', 'kazoo member 2 entered');
note sprintf('opened for all within %.2f s', time() - $t);
my %m = members('etl-sync');
is(scalar(grep { $_ ne 'ready' } keys %m), 5, 'ZooKeeper: five members');
ok(exists $m{ready}, 'and the ready node');
is(scalar(grep { $_ ne 'ready' && $m{$_} eq '0x0' } keys %m), 0, 'every member is ephemeral');
my %owners = map { $m{$_} => 1 } grep { $_ ne 'ready' } keys %m;
is(scalar(keys %owners), 5, 'five members, five ZooKeeper sessions (one per cluster, two kazoo)');

# membership outlasts the statement and its transactions
$s{A}->query_safe('BEGIN; SELECT 1; ROLLBACK;');
$s{B}->query_safe('BEGIN; SELECT 1; COMMIT;');
is(join('/', census('etl-sync')), '5/1', 'after a rollback on A and a commit on B: still five members');

#
# 2. leave ordering: nobody leaves before the last one leaves
#
foreach my $c (qw(A B))
{
	ok(start_waiting($node{$c}, $s{$c}, "SELECT zk_barrier_leave('etl-sync', '60s')"), "$c: zk_barrier_leave waits");
}
is($k1->cmd('leave'), 'leaving', 'kazoo member 1 leaves');
ok(wait_until(sub { !(census('etl-sync'))[1] }, 10, 0.1), 'the ready node is gone with the first leave');
ok(start_waiting($C, $s{C}, "SELECT zk_barrier_leave('etl-sync', '60s')"), 'C: zk_barrier_leave waits');
sleep 1;
ok(($s{A}->running && $s{B}->running && $s{C}->running),
	'A, B and C are still leaving while kazoo member 2 is in');
is($k1->read_line(0.2), undef, 'kazoo member 1 too');
my ($in) = census('etl-sync');
ok($in >= 1, "the barrier is not empty ($in members)");
is($k2->cmd('leave'), 'leaving', 'kazoo member 2 leaves, last');
foreach my $c (qw(A B C))
{
	my $r = finish($s{$c}, 20);
	is($r->{out}, 't', "$c: zk_barrier_leave returns true") or diag $r->{err};
}
is($k1->read_line(20), 'left', 'kazoo member 1 left');
is($k2->read_line(20), 'left', 'kazoo member 2 left');
is(wait_census('etl-sync', 0, 0), '0/0', 'ZooKeeper: no member and no ready node left');
$k1->quit;
$k2->quit;
foreach my $c (qw(A B C))
{
	my $r = $s{$c}->query("SELECT zk_barrier_leave('etl-sync', '0')");
	is($r->{sqlstate}, '55000', "$c: no longer a member (55000)");
}

#
# 3. a stale ready node is not a member and opens nothing
#
zkq($zk, 'create', "$BAR/stale/ready");
my $old_ready = zk_czxid($zk, "$BAR/stale/ready");
my $r = $s{A}->query("SELECT zk_barrier_enter('stale', 2, '1s')");
is($r->{out}, 'f', 'a member with a stale ready node and parties 2: false after the timeout') or diag $r->{err};
is(join('/', census('stale')), '0/1', 'it was withdrawn; the stale ready is all there is');
ok(start_waiting($A, $s{A}, "SELECT zk_barrier_enter('stale', 2, '60s')"), 'A enters again');
sleep 0.5;
ok($s{A}->running, 'and waits');
$r = $s{B}->query("SELECT zk_barrier_enter('stale', 2, '60s')");
is($r->{out}, 't', 'B enters: true') or diag $r->{err};
$r = finish($s{A});
is($r->{out}, 't', 'A: true') or diag $r->{err};
my $new_ready = zk_czxid($zk, "$BAR/stale/ready");
ok(defined $new_ready && $new_ready > $old_ready, 'the ready node was replaced by a new one');
$s{B}->send("SELECT zk_barrier_leave('stale', '30s')");
$r = $s{A}->query("SELECT zk_barrier_leave('stale', '30s')");
is($r->{out}, 't', 'A leaves') or diag $r->{err};
$r = finish($s{B});
is($r->{out}, 't', 'B leaves') or diag $r->{err};
is(wait_census('stale', 0, 0), '0/0', 'nothing left');

#
# 4. withdrawn members do not count for later ones
#
my %w;
foreach my $c (qw(A B C))
{
	$w{$c} = new_session($node{$c}, name => "withdrawn_$c");
}
# B and C first, then A with a limit long enough for the census below to
# see it in even on a loaded machine (a 1 s limit could run out before
# ZooKeeper was asked)
ok(start_waiting($B, $w{B}, "SELECT zk_barrier_enter('wd', 4)"), 'B waits without limit');
ok(start_waiting($C, $w{C}, "SELECT zk_barrier_enter('wd', 4)"), 'C waits without limit');
$w{A}->send("SELECT zk_barrier_enter('wd', 4, '6s')");
is(wait_census('wd', 3, 0), '3/0', 'three members');
$r = finish($w{A});
is($r->{out}, 'f', 'A: false after its timeout') or diag $r->{err};
$C->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $w{C}->pid . ')');
$r = finish($w{C});
is($r->{sqlstate}, '57014', 'C: cancelled (57014)') or diag $r->{err};
$B->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $w{B}->pid . ')');
finish($w{B}, 10);
is(wait_census('wd', 0, 0, 5), '0/0', 'the timed-out, cancelled and terminated members are withdrawn');
# A and B enter again first: an empty barrier's node is a container, which
# ZooKeeper may reap at any moment, and kazoo's enter gives up (without
# participating) when the node goes between its ensure_path and its create
$w{B} = new_session($B, name => 'withdrawn_B2');
foreach my $c (qw(A B))
{
	ok(start_waiting($node{$c}, $w{$c}, "SELECT zk_barrier_enter('wd', 4, '60s')"), "$c enters again");
}
my $k3 = kazoo_member('wd', 4);
is($k3->cmd('enter'), 'entering', 'a kazoo member enters wd for four');
is(wait_census('wd', 3, 0), '3/0', 'three members: the withdrawn ones are not among them');
sleep 1;
is($k3->read_line(0.2), undef, 'the kazoo member does not pass on their account');
ok($w{A}->running && $w{B}->running, 'nor do A and B');
$w{C}->send("SELECT zk_barrier_enter('wd', 4, '60s')");
foreach my $c (qw(A B C))
{
	$r = finish($w{$c}, 20);
	is($r->{out}, 't', "$c: true with the kazoo member and three SQL members") or diag $r->{err};
}
is($k3->read_line(20), 'entered', 'the kazoo member entered');

#
# 5. a member terminated inside the barrier: the others' leave does not wait for it
#
$A->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $w{A}->pid . ')');
finish($w{A}, 10);
ok(wait_until(sub { (census('wd'))[0] == 3 }, 5, 0.1), 'the terminated member is gone within 5 s');
$w{B}->send("SELECT zk_barrier_leave('wd', '30s')");
is($k3->cmd('leave'), 'leaving', 'the kazoo member leaves');
$r = $w{C}->query("SELECT zk_barrier_leave('wd', '30s')");
is($r->{out}, 't', 'C leaves') or diag $r->{err};
$r = finish($w{B});
is($r->{out}, 't', 'B leaves') or diag $r->{err};
is($k3->read_line(20), 'left', 'the kazoo member left');
$k3->quit;
is(wait_census('wd', 0, 0), '0/0', 'nothing left');

#
# 6. two watches per barrier per cluster (children, ready)
#
sleep 0.5;
my $wc0 = zk_watch_count($zk);
my @waiters;
foreach my $c (qw(A B))
{
	foreach my $i (1 .. 4)
	{
		my $x = new_session($node{$c}, name => "watch_${c}_$i");
		ok(start_waiting($node{$c}, $x, "SELECT zk_barrier_enter('watched', 20)"), "$c: waiter $i");
		push @waiters, [ $c, $x ];
	}
	my $want = $wc0 + ($c eq 'A' ? 2 : 4);
	my $now;
	wait_until(sub { $now = zk_watch_count($zk); $now >= $want }, 5, 0.1);
	sleep 0.3;
	$now = zk_watch_count($zk);
	is($now, $want, "four waiters on " . ($c eq 'A' ? 'A' : 'A and B') . ": " . ($c eq 'A' ? 'two watches' : 'four watches') . " more than before");
}
foreach my $x (@waiters)
{
	$node{ $x->[0] }->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $x->[1]->pid . ')');
	finish($x->[1]);
	$x->[1]->quit;
}
is(wait_census('watched', 0, 0), '0/0', 'the cancelled waiters are withdrawn');
my $wc;
wait_until(sub { $wc = zk_watch_count($zk); $wc <= $wc0 }, 5, 0.1);
is($wc, $wc0, 'and their watches are gone');
foreach my $c (qw(A B C))
{
	ok(wait_until(sub { zk_status_value($node{$c}, 'entries_used') eq '0' }, 5, 0.1),
		"$c: no shared-memory entry left");
}

$_->quit foreach (values %s, values %w);
$_->stop('fast') foreach ($A, $B, $C);
zk_stop($zk);
note sprintf('400_barrier: %.1fs', time() - $T0);
done_testing();
