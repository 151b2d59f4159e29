
# 195_lock_multi.pl - several locks at once, all or none (issue 39).
#
# zk_lock(text[]) and its family take each distinct name once, in one order
# every backend of every cluster uses, so two multi-locks never wait for each
# other in a circle; a timeout, a cancel, a terminated backend or a try that
# finds a member taken lets go of every member taken so far (counted through
# ZooKeeper); the tokens that come back are the members' czxids.
#
# 1. The control: two sessions taking two names one by one in opposite
#    orders wait for each other until one fails (the deadlock detector's
#    40P01, or the timeout): what a multi-lock must never do.
# 2. pgbench on two clusters, 3 clients each, each transaction a random
#    permutation of 3 of 5 names: no timeout, no error, and no two holders
#    of a name at once (intervals recorded on both clusters, merged here).
# 3. Tokens are the czxids of the members' nodes, in the array's order.
# 4. A wait that runs out, a cancelled wait and a terminated backend leave
#    no node of the multi-lock in ZooKeeper; a try that finds a member taken
#    (also by kazoo) holds nothing.  A wait that runs out after a first
#    member took a while says so: its 55P03 detail gives the call's timeout
#    and the member it waited for, not what was left for that member.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use ZkLockTest;

my $zk = zk_start();
my ($node1, $node2) = map { zk_node($_, $zk, session_timeout => '10s', connect_timeout => '5s') }
  qw(multi1 multi2);
my $LOCKS = '/zklock/locks';

my $a1 = new_session($node1, name => 'a1');
my $a2 = new_session($node1, name => 'a2');
my $b1 = new_session($node2, name => 'b1');

sub nodes_of { my @n = zk_lock_nodes($zk, "$LOCKS/$_[0]"); return scalar @n; }

# wait, through ZooKeeper, until none of the names has a contender node
sub all_gone
{
	my @names = @_;
	return wait_until(sub { !grep { nodes_of($_) } @names }, 30);
}

#
# 1. the control: one by one, opposite orders
#
$a1->query_safe('BEGIN');
$a1->query_safe("SELECT zk_lock('cx')");
$b1->query_safe('BEGIN');
$b1->query_safe("SELECT zk_lock('cy')");
$a1->send("SELECT zk_lock('cy', '3s')");
my $rb = $b1->query("SELECT zk_lock('cx', '3s')", 30);
my $ra = $a1->wait(30);
# (the deadlock detector ends it after deadlock_timeout with 40P01, or the
# timeout with 55P03: either way one of them fails)
ok((grep { $_->{sqlstate} =~ /^(55P03|40P01)$/ } ($ra, $rb)) == 1,
	"control: locks taken one by one in opposite orders wait for each other until one fails ($ra->{sqlstate}, $rb->{sqlstate})");
$a1->query('ROLLBACK');
$b1->query('ROLLBACK');
ok(all_gone(qw(cx cy)), 'control: nothing left');

#
# 2. pgbench on both clusters, random permutations of 3 of 5 names
#
my $dir = PostgreSQL::Test::Utils::tempdir('pgbench');
my $script = <<'EOS';
BEGIN;
SELECT array_to_string(p.names, ',') AS names, array_to_string(zk_lock(p.names, '60s'), ',') AS toks, clock_timestamp() AS t0 FROM (SELECT ARRAY(SELECT 'm' || i FROM generate_series(1, 5) i ORDER BY random() LIMIT 3) AS names) p \gset
SELECT pg_sleep(0.002);
INSERT INTO grants SELECT u.n, u.t::bigint, ':t0', clock_timestamp() FROM unnest(string_to_array(':names', ','), string_to_array(':toks', ',')) AS u(n, t);
COMMIT;
EOS
open(my $fh, '>', "$dir/multi.sql") or die;
print $fh $script;
close $fh;
foreach my $n ($node1, $node2)
{
	$n->safe_psql('postgres', 'CREATE TABLE grants (name text, token bigint, t0 timestamptz, t1 timestamptz)');
}
my (@h, @out, @err);
foreach my $i (0, 1)
{
	my $n = ($node1, $node2)[$i];
	($out[$i], $err[$i]) = ('', '');
	push @h, IPC::Run::start(
		[ $n->installed_command('pgbench'), '-n', '-h', $n->host, '-p', $n->port,
		  '-c', '3', '-t', '40', '-f', "$dir/multi.sql", 'postgres' ],
		'<', \undef, '>', \$out[$i], '2>', \$err[$i], IPC::Run::timeout(300));
}
my @rc;
foreach my $i (0, 1)
{
	my $ok = eval { $h[$i]->finish };
	push @rc, $ok ? 0 : (($? >> 8) || -1);
	note "pgbench $i rc=$rc[-1]\n$out[$i]\n$err[$i]";
}
is_deeply(\@rc, [ 0, 0 ], 'pgbench on both clusters finished');
unlike($err[0] . $err[1], qr/(ERROR|FATAL|aborted)/, 'no error, no timeout: multi-locks never wait in a circle');
my @rows;
foreach my $n ($node1, $node2)
{
	push @rows, map { [ split /\|/ ] }
	  split /\n/, $n->safe_psql('postgres',
		"SELECT name, token, extract(epoch FROM t0), extract(epoch FROM t1) FROM grants");
}
is(scalar @rows, 2 * 3 * 40 * 3, 'every member of every transaction recorded');
my ($overlaps, $backwards, %by) = (0, 0);
push @{ $by{ $_->[0] } }, $_ foreach @rows;
foreach my $name (sort keys %by)
{
	my @g = sort { $a->[2] <=> $b->[2] } @{ $by{$name} };
	for my $k (1 .. $#g)
	{
		$overlaps++ if $g[$k][2] < $g[ $k - 1 ][3];
		$backwards++ if $g[$k][1] <= $g[ $k - 1 ][1];
	}
}
is($overlaps, 0, 'no two holders of a name at once, across both clusters');
is($backwards, 0, 'tokens of a name strictly increase in grant order');
ok(all_gone(map { "m$_" } 1 .. 5), 'nothing left of the pgbench locks');

#
# 3. tokens are the members' czxids, in the array's order
#
$a1->query_safe('BEGIN');
my @t = split /,/, $a1->query_safe("SELECT array_to_string(zk_lock(ARRAY['tq', 'tp']), ',')");
my %cz = map {
	my @n = zk_lock_nodes($zk, "$LOCKS/$_");
	($_ => (@n == 1 ? zk_czxid($zk, $n[0]{path}) : 'none'))
} qw(tq tp);
is_deeply(\@t, [ $cz{tq}, $cz{tp} ], 'the tokens are the czxids of the members, in the array order');
$a1->query_safe('COMMIT');

#
# 4. letting go: a timeout, a cancel, a terminated backend, a try
#
$b1->query_safe('BEGIN');
$b1->query_safe("SELECT zk_lock('w3')");

# a wait that runs out: w1 and w2 were taken (they sort first), then let go
my $r = $a1->query("SELECT zk_session_lock(ARRAY['w3', 'w1', 'w2'], '1s')", 30);
is($r->{sqlstate}, '55P03', 'a multi-lock that waits too long fails with 55P03');
ok(all_gone(qw(w1 w2)), 'and its members taken so far are gone from ZooKeeper');
is(nodes_of('w3'), 1, "only the other cluster's node of w3 is left");
is($a1->query_safe("SELECT zk_lock_token('w1') IS NULL"), 't', 'the session holds none of them');

# its detail tells the whole call's wait, not what was left of it for the
# member that ran out: w0 (first in order) is let go of after a second,
# w3 never
$b1->query_safe("SELECT zk_session_lock('w0')");
$a1->send("SELECT zk_lock(ARRAY['w3', 'w0'], '3s')");
ok(wait_until(sub { nodes_of('w0') == 2 }, 30), 'a multi-lock waits for w0 first');
sleep 1;
$b1->query_safe("SELECT zk_unlock('w0')");
$r = $a1->wait(30);
is($r->{sqlstate}, '55P03', 'it takes w0 once let go of, then runs out waiting for w3');
like($r->{err},
	qr/DETAIL:\s+The call waited 3000 ms \(its timeout\) for its 2 locks: it had taken 1 and was waiting for "w3"/,
	"the detail gives the call's timeout, not what was left for w3, and the member it waited for")
  or diag $r->{err};
ok($r->{elapsed} >= 2.9, sprintf('the call ran out after its 3 s (%.2fs)', $r->{elapsed}));
ok(all_gone(qw(w0)), 'w0 is let go of');

# a cancelled wait
$a1->send("SELECT zk_lock(ARRAY['w1', 'w2', 'w3'])");
ok(wait_until(sub { nodes_of('w3') == 2 }, 30), 'the multi-lock waits for w3 holding w1 and w2');
is(nodes_of('w1') + nodes_of('w2'), 2, 'w1 and w2 are held meanwhile');
$a2->query_safe("SELECT pg_cancel_backend(" . $a1->pid . ")");
$r = $a1->wait(30);
is($r->{sqlstate}, '57014', 'the wait is cancelled');
ok(all_gone(qw(w1 w2)), 'a cancelled multi-lock leaves nothing of w1 and w2');
is(nodes_of('w3'), 1, 'nor of w3');

# a terminated backend
my $a3 = new_session($node1, name => 'a3');
$a3->send("SELECT zk_session_lock(ARRAY['w2', 'w3', 'w1'])");
ok(wait_until(sub { nodes_of('w3') == 2 }, 30), 'another multi-lock waits for w3');
$a2->query_safe("SELECT pg_terminate_backend(" . $a3->pid . ")");
$a3->wait(30);
ok(all_gone(qw(w1 w2)), 'a terminated backend leaves nothing of w1 and w2');
is(nodes_of('w3'), 1, 'nor of w3');

# a try that finds a member taken holds nothing
$a1->query_safe('BEGIN');
is($a1->query_safe("SELECT zk_try_lock(ARRAY['w1', 'w3'])"), 'f', 'a try that finds a member taken is false');
is($a1->query_safe("SELECT zk_lock_token('w1') IS NULL"), 't', 'and holds nothing');
$a1->query_safe('COMMIT');
ok(all_gone(qw(w1)), 'w1 is gone from ZooKeeper');
$b1->query_safe('COMMIT');
ok(all_gone(qw(w3)), 'w3 is released');

# a member held by kazoo
my $kz = kazoo_client($zk);
is($kz->cmd("lock $LOCKS/kz2 5"), 'locked', 'kazoo holds kz2');
is($a1->query_safe("SELECT zk_try_session_lock(ARRAY['kz1', 'kz2'])"), 'f',
	'a try whose member kazoo holds is false');
ok(all_gone(qw(kz1)), 'and kz1 is let go');
is($kz->cmd("release $LOCKS/kz2"), 'released', 'kazoo lets go of kz2');
is($a1->query_safe("SELECT cardinality(zk_session_lock(ARRAY['kz1', 'kz2'], '30s'))"), '2',
	'once kazoo lets go both are taken');
is($a1->query_safe("SELECT zk_unlock(ARRAY['kz2', 'kz1'])"), 't', 'zk_unlock of the array lets go of both');
ok(all_gone(qw(kz1 kz2)), 'nothing left');

$kz->quit;
$_->quit foreach ($a1, $a2, $b1);
done_testing();
