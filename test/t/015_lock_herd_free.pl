
# 015_lock_herd_free.pl - the recipe is herd-free: each waiter watches only its
# immediate predecessor (seen through ZooKeeper's own watch listing, wchp),
# nothing watches the lock's parent, and one release wakes one waiter.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('herd', $zk, session_timeout => '20s');
my $LOCK = '/zklock/locks/herd';

# watches by path, from ZooKeeper: { path => number of watching sessions }
sub watches
{
	my $out = zk_cmd($zk, 'wchp') // '';
	my (%w, $path);
	for my $line (split /\n/, $out)
	{
		if ($line =~ m{^(/\S*)}) { $path = $1; $w{$path} //= 0; }
		elsif ($line =~ /^\s+0x/ && defined $path) { $w{$path}++; }
	}
	return \%w;
}

my $holder = new_session($node, name => 'holder');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT zk_lock('herd')");

my @waiters;
for my $i (1 .. 4)
{
	my $w = new_session($node, name => "waiter$i");
	$w->query_safe('BEGIN');
	$w->send("SELECT zk_lock('herd')");
	# one at a time, so that arrival order is known
	ok(scalar(zk_wait_count($zk, $LOCK, $i + 1, 10)), "waiter $i queued");
	push @waiters, $w;
}

my @nodes = sort { substr($a, -10) <=> substr($b, -10) } zk_children($zk, $LOCK);
is(scalar(@nodes), 5, 'five contender nodes');

my $w;
ok(wait_until(sub { $w = watches(); grep({ ($w->{"$LOCK/$_"} // 0) == 1 } @nodes[0 .. 3]) == 4 }, 10),
	'each of the four older nodes is watched by exactly one session')
  or diag explain $w;
is($w->{"$LOCK/$nodes[4]"} // 0, 0, 'the newest node is watched by nobody');
is($w->{$LOCK} // 0, 0, 'nobody watches the parent (no listing watch, no herd)');
my $total = 0;
$total += $_ for values %$w;
is($total, 4, 'four watches in all for four waiters');

my $ev0 = zk_status_value($node, 'watch_events');
my $gr0 = zk_status_value($node, 'grants');
$holder->query_safe('COMMIT');
my $r = $waiters[0]->wait(10);
is($r->{sqlstate}, '00000', 'the first waiter got the lock') or diag $r->{err};
ok(wait_until(sub { zk_status_value($node, 'grants') == $gr0 + 1 }, 5), 'one grant');
sleep 1;
is(zk_status_value($node, 'watch_events') - $ev0, 1, 'one release fired one watch');
for my $i (1 .. 3)
{
	ok($waiters[$i]->{pending}, "waiter " . ($i + 1) . " still waits");
}
# the waiter was handed the lock as the delete was sent (017): it lands soon after
ok(scalar(zk_wait_count($zk, $LOCK, 4, 10)), 'four nodes left');

# hand the lock down the line
for my $i (0 .. 3)
{
	$waiters[$i]->wait(30) if $i > 0;
	$waiters[$i]->query_safe('COMMIT');
}
ok(scalar(zk_wait_count($zk, $LOCK, 0, 5)), 'all nodes gone');
is(zk_status_value($node, 'watch_events') - $ev0, 4, 'four releases, four watch events');

$_->quit for ($holder, @waiters);
$node->stop;
done_testing();
