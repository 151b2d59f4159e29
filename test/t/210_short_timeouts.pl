
# 210_short_timeouts.pl - short timeouts fire within milliseconds of their
# deadline (issue 6, weakness 17).  With another session holding 'x',
# zk_lock('x', '50ms'), lock_timeout = '50ms' and statement_timeout =
# '100ms' must end the wait after about their own duration: not before it,
# and well under a second (the backend must be woken when its request
# starts waiting, not find out on a one-second tick).  Each case runs five
# times, so a tick that happens to fall early cannot hide the defect.
#
# The elapsed time is taken twice: inside the server (clock_timestamp()
# around the call, in a plpgsql block that catches the error) and by the
# client around a top-level statement.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('short', $zk,
	session_timeout => '10s',
	connect_timeout => '5s');

my $X = '/zklock/locks/x';
my $ROUNDS = 5;

# runs $q, returns the SQLSTATE it ended with and the seconds it took,
# measured by the server
$node->safe_psql('postgres', q{
CREATE FUNCTION timed(q text, OUT code text, OUT secs float8)
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
BEGIN
	BEGIN
		EXECUTE q;
		code := '00000';
	EXCEPTION WHEN query_canceled OR others THEN
		code := SQLSTATE;
	END;
	secs := extract(epoch FROM clock_timestamp() - t0);
END
$$;
});

my $holder = new_session($node, name => 'holder');
$holder->query_safe('BEGIN');
my $tok = $holder->query_safe("SELECT zk_lock('x')");
like($tok, qr/^\d+$/, "holder took 'x' (token $tok)");
is(zk_count($zk, $X), 1, "the holder's node is in ZooKeeper");

my $c = new_session($node, name => 'contender');

# server-side measure: "code|secs"
sub timed
{
	my ($sql) = @_;
	my $r = $c->query("SELECT code || '|' || secs FROM timed(\$q\$$sql\$q\$)", 30);
	return ('TIMEOUT', 99) unless $r->{done} && $r->{sqlstate} eq '00000';
	my ($code, $secs) = split /\|/, $r->{out};
	return ($code // '', $secs // 99);
}

my @cases = (
	{
		what => "zk_lock('x', '50ms')",
		set => undef,
		sql => "SELECT zk_lock('x', '50ms')",
		code => '55P03',
		min => 0.04,
	},
	{
		what => "lock_timeout = '50ms', zk_lock('x')",
		set => "SET lock_timeout = '50ms'",
		sql => "SELECT zk_lock('x')",
		code => '55P03',
		min => 0.04,
	},
	{
		what => "statement_timeout = '100ms', zk_lock('x')",
		set => "SET statement_timeout = '100ms'",
		sql => "SELECT zk_lock('x')",
		code => '57014',
		min => 0.09,
	},
	{
		what => "zk_lock_shared('x', '50ms')",
		set => undef,
		sql => "SELECT zk_lock_shared('x', '50ms')",
		code => '55P03',
		min => 0.04,
	},);

foreach my $case (@cases)
{
	my (@server, @client);
	for my $i (1 .. $ROUNDS)
	{
		# inside the server
		$c->query_safe($case->{set}) if $case->{set};
		my ($code, $secs) = timed($case->{sql});
		$c->query_safe('RESET ALL');
		is($code, $case->{code}, "$case->{what}, round $i (server-timed): fails with $case->{code}");
		ok($secs >= $case->{min} && $secs < 0.5,
			sprintf("$case->{what}, round $i (server-timed): ended after %.3fs, expected %.2f..0.5s",
				$secs, $case->{min}));
		push @server, sprintf('%.3f', $secs);

		# top level, timed by the client
		$c->query_safe($case->{set}) if $case->{set};
		my $r = $c->query($case->{sql}, 30);
		$c->query_safe('RESET ALL');
		is($r->{sqlstate}, $case->{code}, "$case->{what}, round $i (top level): fails with $case->{code}")
		  or diag $r->{err};
		ok($r->{elapsed} >= $case->{min} && $r->{elapsed} < 0.5,
			sprintf("$case->{what}, round $i (top level): returned after %.3fs, expected %.2f..0.5s",
				$r->{elapsed}, $case->{min}));
		push @client, sprintf('%.3f', $r->{elapsed});
	}
	note "$case->{what}: server-timed @server; client-timed @client";
}

# nothing left behind by the timed-out waits: only the holder's entry and node
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '1' }, 10),
	'only the holder\'s entry is left in shared memory')
  or diag 'entries_used ' . zk_status_value($node, 'entries_used');
ok(scalar(zk_wait_count($zk, $X, 1, 10)), "only the holder's node is left in ZooKeeper");
is(try_lock_elsewhere($node, 'x'), 'f', 'the holder still holds x');

$holder->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, '/zklock/locks', 0, 10)), 'nothing left in ZooKeeper after the holder commits');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');

# the timeouts do not misfire when the lock is free
my $r = $c->query("SELECT zk_lock('x', '50ms') IS NOT NULL", 30);
is($r->{out}, 't', "zk_lock('x', '50ms') succeeds at once when x is free") or diag $r->{err};

$c->quit;
$holder->quit;
$node->stop;
done_testing();
