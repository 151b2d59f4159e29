# 230_lock_watches.pl - a waiter that gives up leaves no watch behind on the
# ZooKeeper server.
#
# A waiting contender watches its predecessor's node.  When the wait ends
# early (timeout argument, lock_timeout, statement_timeout, cancel,
# terminate; exclusive or shared) its node goes, and so must its watch:
# ZooKeeper's own watch listings (four-letter words wchp: path -> sessions,
# wchc: session -> paths) must not list the predecessor's node any more,
# while the holder still holds it.  For contrast, a live waiter shows
# exactly one watch on its predecessor, so the check can fail.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('watches', $zk, session_timeout => '20s', connect_timeout => '5s');
my $LOCKS = '/zklock/locks';


# Watches under $LOCKS as { path => number of sessions watching it }
# (wchp), and as { path => number of sessions } again from wchc, so that
# both listings are checked.
sub watches
{
	my (%p, %c, $cur);
	foreach my $line (split /\n/, zk_fourlw($zk, 'wchp'))
	{
		if ($line =~ m{^(/\S*)}) { $cur = $1; $p{$cur} //= 0; }
		elsif ($line =~ /^\s+0x[0-9a-f]+/ && defined $cur) { $p{$cur}++; }
	}
	foreach my $line (split /\n/, zk_fourlw($zk, 'wchc'))
	{
		if ($line =~ /^\s+(\/\S*)/) { $c{$1}++; }
	}
	my %w;
	foreach my $path (keys %p, keys %c)
	{
		next unless index($path, "$LOCKS/") == 0;
		$w{$path} = { wchp => $p{$path} // 0, wchc => $c{$path} // 0 };
	}
	return \%w;
}

# the watches under one lock as "node:wchp/wchc ..." (sorted), '' if none
sub watch_summary
{
	my ($lock) = @_;
	my $w = watches();
	return join(' ',
		map { my $n = $_; $n =~ s{^\Q$LOCKS/$lock/\E}{}; "$n:$w->{$_}{wchp}/$w->{$_}{wchc}" }
		sort grep { index($_, "$LOCKS/$lock/") == 0 } keys %$w);
}

# wait until the watches under $lock are $want; returns what was seen last
sub wait_watches
{
	my ($lock, $want, $secs) = @_;
	my $got;
	wait_until(sub { $got = watch_summary($lock); $got eq $want }, $secs // 5, 0.2);
	return $got;
}

# contender node names under $lock, in queue order
sub nodes_of
{
	my ($lock) = @_;
	return map { $_->{name} } zk_lock_nodes($zk, "$LOCKS/$lock");
}

my $holder = new_session($node, name => 'holder');
my $ctl = new_session($node, name => 'ctl');

#
# A waiter right behind the holder gives up, in every way a wait can end
#
# The timeouts leave the checks of the live waiter room on a loaded machine
# (its watch is looked for while it still waits: up to 2 + 5 s)
my @ways = (
	[ 'timeout argument', 'wt', 'BEGIN', "SELECT zk_lock('wt', '8s')", '55P03' ],
	[ 'lock_timeout', 'wl', "BEGIN; SET LOCAL lock_timeout = '8s'", "SELECT zk_lock('wl')", '55P03' ],
	[ 'statement_timeout', 'ws', "BEGIN; SET LOCAL statement_timeout = '8s'", "SELECT zk_lock('ws')", '57014' ],
	[ 'pg_cancel_backend', 'wc', 'BEGIN', "SELECT zk_lock('wc')", '57014' ],
	[ 'pg_terminate_backend', 'wx', 'BEGIN', "SELECT zk_lock('wx')", 'EXIT' ],
	[ 'shared wait, timeout argument', 'wr', 'BEGIN', "SELECT zk_lock_shared('wr', '8s')", '55P03' ],
	[ 'session-level wait, timeout argument', 'wz', 'SELECT 1', "SELECT zk_session_lock('wz', '8s')", '55P03' ],
);

$holder->query_safe('BEGIN');
$holder->query_safe("SELECT zk_lock('$_->[1]')") foreach @ways;

foreach my $way (@ways)
{
	my ($what, $lock, $setup, $sql, $state) = @$way;
	my $x = new_session($node, name => "x_$lock");
	my ($hnode) = nodes_of($lock);
	$x->query_safe($setup);
	$x->send($sql);
	ok(scalar(zk_wait_count($zk, "$LOCKS/$lock", 2, 10)), "$what: the waiter queued behind the holder");
	# the live waiter: one watch, on the holder's node, from one session
	my $seen = wait_watches($lock, "$hnode:1/1");
	is($seen, "$hnode:1/1", "$what: while it waits, its predecessor (the holder's node) has one watch");

	if ($what eq 'pg_cancel_backend')
	{
		$ctl->query_safe("SELECT pg_cancel_backend($x->{pid})");
	}
	elsif ($what eq 'pg_terminate_backend')
	{
		$ctl->query_safe("SELECT pg_terminate_backend($x->{pid})");
	}
	my $r = $x->wait(20);
	if ($state eq 'EXIT')
	{
		ok($r->{done} && $r->{exited}, "$what: the waiter's session ended");
	}
	else
	{
		is($r->{sqlstate}, $state, "$what: the wait ended with $state") or diag $r->{err};
	}
	ok(scalar(zk_wait_count($zk, "$LOCKS/$lock", 1, 5)), "$what: the waiter's node is gone");
	is(try_lock_elsewhere($node, $lock), 'f', "$what: the holder still holds");
	$seen = wait_watches($lock, '', 15);
	is($seen, '', "$what: no watch left on the holder's node (wchp and wchc)");
	$x->quit;
}

#
# A live waiter and, behind it, one that gives up: only the live one's
# watch remains
#
my $live = new_session($node, name => 'live');
my $gone = new_session($node, name => 'gone');
$holder->query_safe("SELECT zk_lock('wq')");
my ($hnode) = nodes_of('wq');
queue_request($zk, $live, "SELECT zk_lock('wq')", "$LOCKS/wq", 2, 'queue: the live waiter queued');
my (undef, $lnode) = nodes_of('wq');
queue_request($zk, $gone, "SELECT zk_lock('wq', '8s')", "$LOCKS/wq", 3, 'queue: the second waiter queued behind it');
my $want = join(' ', sort("$hnode:1/1", "$lnode:1/1"));
my $seen = wait_watches('wq', $want);
is($seen, $want,
	'queue: two watches, each waiter on its predecessor');
my $r = $gone->wait(20);
is($r->{sqlstate}, '55P03', 'queue: the second waiter timed out') or diag $r->{err};
$gone->query('ROLLBACK');
ok(scalar(zk_wait_count($zk, "$LOCKS/wq", 2, 5)), "queue: its node is gone");
$seen = wait_watches('wq', "$hnode:1/1", 15);
is($seen, "$hnode:1/1", "queue: the live waiter's watch remains, none on its own node");
ok($live->running, 'queue: the live waiter still waits');

#
# zk_try_lock on a taken lock never leaves a watch
#
$holder->query_safe("SELECT zk_lock('wy')");
is(try_lock_elsewhere($node, 'wy'), 'f', 'zk_try_lock finds wy taken');
is(try_lock_shared_elsewhere($node, 'wy'), 'f', 'zk_try_lock_shared finds wy taken');
is(wait_watches('wy', '', 10), '', 'the failed try-locks left no watch');

#
# Everything ends: no watch at all
#
$holder->query_safe('COMMIT');
$r = $live->wait(20);
is($r->{sqlstate}, '00000', 'the live waiter gets the lock') or diag $r->{err};
$live->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'no contender nodes left');
my $all;
ok(wait_until(sub { $all = watches(); !%$all }, 5), 'no watch left anywhere under /zklock/locks')
  or diag explain $all;
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');

$_->quit for ($holder, $ctl, $live, $gone);
$node->stop;
done_testing();
