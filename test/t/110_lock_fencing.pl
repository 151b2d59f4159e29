
# 110_lock_fencing.pl - fencing tokens.
#
# A token is the czxid of the grant's lock node, so successive grants of one
# name, by any session of any PostgreSQL cluster on the same ZooKeeper, get
# strictly increasing tokens.  zk_lock_token(name) returns the token of a
# lock this backend holds, NULL otherwise.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my ($node1, $node2) = map { zk_node($_, $zk, session_timeout => '10s', connect_timeout => '3s') }
  qw(fence1 fence2);

my $LOCKS = '/zklock/locks';
my $F = "$LOCKS/f";

my $a1 = new_session($node1, name => 'a1');
my $a2 = new_session($node1, name => 'a2');
my $b1 = new_session($node2, name => 'b1');
my $b2 = new_session($node2, name => 'b2');

my @tokens;    # every grant of 'f', in order: [ who, token ]

sub record
{
	my ($who, $tok) = @_;
	push @tokens, [ $who, $tok ];
	return $tok;
}

# the single contender node of $path held by nobody else, and its czxid
sub only_node_czxid
{
	my ($path) = @_;
	my @n = zk_lock_nodes($zk, $path);
	return undef unless @n == 1;
	return zk_czxid($zk, $n[0]{path});
}

#
# 1. transaction lock on cluster 1
#
$a1->query_safe('BEGIN');
is($a1->query_safe("SELECT zk_lock_token('f') IS NULL"), 't', 'zk_lock_token is NULL before the lock is taken');
my $t = record('a1', $a1->query_safe("SELECT zk_lock('f')"));
like($t, qr/^\d+$/, "zk_lock returns token $t");
is($a1->query_safe("SELECT zk_lock_token('f')"), $t, 'zk_lock_token returns the token zk_lock returned');
is(only_node_czxid($F), $t, "token is the czxid of the lock node read through ZooKeeper")
  or diag zk_tree($zk, $F);
is($a2->query_safe("SELECT zk_lock_token('f') IS NULL"), 't',
	'zk_lock_token is NULL in another backend of the same cluster');
is($b1->query_safe("SELECT zk_lock_token('f') IS NULL"), 't',
	'and in a backend of the other cluster');
is($a1->query_safe("SELECT zk_lock('f')"), $t, 're-taking it returns the same token');
$a1->query_safe('COMMIT');
is($a1->query_safe("SELECT zk_lock_token('f') IS NULL"), 't', 'zk_lock_token is NULL after COMMIT');

#
# 2. transaction lock on cluster 2
#
$b1->query_safe('BEGIN');
$t = record('b1', $b1->query_safe("SELECT zk_lock('f')"));
is($b1->query_safe("SELECT zk_lock_token('f')"), $t, 'cluster 2: zk_lock_token equals the returned token');
is(only_node_czxid($F), $t, 'cluster 2: token is the czxid of its node');
$b1->query_safe('ROLLBACK');
is($b1->query_safe("SELECT zk_lock_token('f') IS NULL"), 't', 'zk_lock_token is NULL after ROLLBACK');

#
# 3. session lock on cluster 1
#
$t = record('a2', $a2->query_safe("SELECT zk_session_lock('f')"));
is($a2->query_safe("SELECT zk_lock_token('f')"), $t, 'session lock: zk_lock_token equals the returned token');
is(only_node_czxid($F), $t, 'session lock: token is the czxid of its node');
$a2->query_safe('BEGIN; SELECT 1; COMMIT');
is($a2->query_safe("SELECT zk_lock_token('f')"), $t, 'the session lock keeps its token across transactions');
is($a2->query_safe("SELECT zk_session_lock('f')"), $t, 'a stacked hold returns the same token');
$a2->query_safe("SELECT zk_unlock('f')");
is($a2->query_safe("SELECT zk_lock_token('f')"), $t, 'one hold left: same token');
$a2->query_safe("SELECT zk_unlock('f')");
is($a2->query_safe("SELECT zk_lock_token('f') IS NULL"), 't', 'NULL after the last zk_unlock');

#
# 4. try-lock on cluster 2
#
# zk_unlock queues the delete and returns without waiting for ZooKeeper
# (doc/locks.md), so a try on another cluster may still see the node: wait,
# through ZooKeeper, until it is gone.
ok(wait_until(sub { !zk_lock_nodes($zk, $F) }, 30), "the session lock's node is deleted after the last zk_unlock");
$b1->query_safe('BEGIN');
is($b1->query_safe("SELECT zk_try_lock('f')"), 't', 'zk_try_lock on cluster 2');
$t = record('b1-try', $b1->query_safe("SELECT zk_lock_token('f')"));
like($t, qr/^\d+$/, 'zk_lock_token gives the token of a lock taken with zk_try_lock');
is(only_node_czxid($F), $t, 'and it is the czxid of its node');
$b1->query_safe('COMMIT');

#
# 5. shared holders on both clusters at once: each has its own node and
#    token, later arrivals larger
#
$a1->query_safe('BEGIN');
$b1->query_safe('BEGIN');
my $sa = record('a1-shared', $a1->query_safe("SELECT zk_lock_shared('f')"));
my $sb = record('b1-shared', $b1->query_safe("SELECT zk_lock_shared('f')"));
is($a1->query_safe("SELECT zk_lock_token('f')"), $sa, 'shared: zk_lock_token equals the returned token (cluster 1)');
is($b1->query_safe("SELECT zk_lock_token('f')"), $sb, 'shared: zk_lock_token equals the returned token (cluster 2)');
my @sn = zk_lock_nodes($zk, $F);
is(scalar(@sn), 2, 'two shared nodes');
is(join(',', map { zk_czxid($zk, $_->{path}) // 'none' } @sn), "$sa,$sb",
	"shared tokens are the czxids of the two nodes, in queue order");
$a1->query_safe('COMMIT');
$b1->query_safe('COMMIT');

#
# 6. a queue across both clusters: grants in arrival order, tokens increase
#
$a1->query_safe('BEGIN');
$t = record('a1-q', $a1->query_safe("SELECT zk_lock('f')"));
queue_request($zk, $b2, "SELECT zk_lock('f')", $F, 2, 'cluster 2 waits (2 nodes)');
queue_request($zk, $a2, "SELECT zk_lock('f')", $F, 3, 'cluster 1 waits behind it (3 nodes)');
queue_request($zk, $b1, "SELECT zk_lock_shared('f')", $F, 4, 'a shared request waits behind them (4 nodes)');
my @q = zk_lock_nodes($zk, $F);
my @qcz = map { zk_czxid($zk, $_->{path}) // -1 } @q;
is($qcz[0], $t, 'the holder is first in line with its token as czxid');

$a1->query_safe('COMMIT');
my $r = $b2->wait(15);
is($r->{sqlstate}, '00000', 'cluster 2 waiter granted') or diag $r->{err};
record('b2-q', $r->{out});
is($r->{out}, $qcz[1], "the waiter's token is the czxid of the node it created while waiting");
is($b2->query_safe("SELECT zk_lock_token('f')"), $r->{out}, 'zk_lock_token agrees');
$b2->query_safe('COMMIT');
$r = $a2->wait(15);
is($r->{sqlstate}, '00000', 'cluster 1 waiter granted') or diag $r->{err};
record('a2-q', $r->{out});
is($r->{out}, $qcz[2], 'its token is the czxid of its node');
$a2->query_safe('COMMIT');
$r = $b1->wait(15);
is($r->{sqlstate}, '00000', 'shared waiter granted') or diag $r->{err};
record('b1-q', $r->{out});
is($r->{out}, $qcz[3], 'its token is the czxid of its node');
$b1->query_safe('COMMIT');

#
# 7. alternating autocommit grants between the clusters
#
for my $i (1 .. 4)
{
	record("a1-$i", $a1->query_safe("SELECT zk_lock('f')"));
	record("b1-$i", $b1->query_safe("SELECT zk_session_lock('f'), zk_unlock('f')") =~ s/\|.*//r);
	record("a2-$i", $a2->query_safe("SELECT zk_lock_shared('f')"));
	record("b2-$i", $b2->query_safe("SELECT zk_lock('f')"));
}

my @bad;
for my $i (1 .. $#tokens)
{
	my ($pw, $pt) = @{ $tokens[ $i - 1 ] };
	my ($w, $tk) = @{ $tokens[$i] };
	push @bad, "$pw:$pt !< $w:$tk" unless defined $tk && $tk =~ /^\d+$/ && $tk > $pt;
}
is(scalar(@bad), 0,
	'tokens of ' . scalar(@tokens) . ' successive grants from two clusters strictly increase')
  or diag join("\n", @bad);
note join(' ', map { "$_->[0]=$_->[1]" } @tokens);

#
# zk_lock_token by bigint key and for other names
#
$a1->query_safe('BEGIN');
my $k = $a1->query_safe('SELECT zk_lock(99)');
is($a1->query_safe('SELECT zk_lock_token(99)'), $k, 'zk_lock_token(99) equals the token of zk_lock(99)');
is($a1->query_safe("SELECT zk_lock_token('99')"), $k, "zk_lock_token('99') too");
is(only_node_czxid("$LOCKS/99"), $k, 'and the czxid of /zklock/locks/99/<node>');
is($a1->query_safe("SELECT zk_lock_token('f') IS NULL"), 't', 'zk_lock_token of a name not held is NULL');
is($a1->query_safe('SELECT zk_lock_token(100) IS NULL'), 't', 'zk_lock_token of a key not held is NULL');
is($a2->query_safe('SELECT zk_lock_token(99) IS NULL'), 't', 'NULL in a backend that does not hold it');
$a1->query_safe('COMMIT');
ok($k > $tokens[-1][1], 'a grant of another name later still gets a larger token (global zxid order)');

$_->quit foreach ($a1, $a2, $b1, $b2);
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper at the end');

$node1->stop;
$node2->stop;
done_testing();
