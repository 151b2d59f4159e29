# 240_upgrade.pl - shared -> exclusive upgrade within one transaction, as
# PostgreSQL's advisory locks do it:
#
# - A holds zk_lock_shared('u'), B waits in zk_lock('u'); A's zk_lock('u')
#   is granted promptly (A waits for no other holder; it must not wait
#   for B, which waits for A), B keeps waiting while A holds, and gets the
#   lock once A commits.  Never two exclusive holders.
# - The same with a reader D queued behind B.
# - A and C both hold zk_lock_shared('d') and both ask for zk_lock('d'):
#   a certain deadlock.  One of them fails at once with 40P01 (well before
#   its timeout); the other gets the lock once the failed one rolls back.
# - A try that meets that deadlock (C's zk_try_lock('t') while A waits to
#   upgrade past C's shared hold) is false, not 40P01.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('upgrade', $zk, session_timeout => '20s', connect_timeout => '5s');
my $LOCKS = '/zklock/locks';

my $A = new_session($node, name => 'A');
my $B = new_session($node, name => 'B');
my $C = new_session($node, name => 'C');
my $D = new_session($node, name => 'D');

# zk_locks rows of one name as "who:mode:state" sorted, for sessions we
# know; A's shared entry is left out (whether the upgraded lock keeps it
# is not the point)
my %who = map { $_->{pid} => $_->{name} } ($A, $B, $C, $D);
sub entries
{
	my ($lock) = @_;
	my $rows = $node->safe_psql('postgres',
		"SELECT pid, mode, state FROM zk_locks WHERE name = '$lock'");
	return join(' ', sort grep { $lock eq 'd' || !/^A:shared:/ }
		  map { my ($p, $m, $s) = split /\|/; ($who{$p} // $p) . ":$m:$s" }
		  grep { $_ ne '' } split /\n/, $rows);
}

# end whatever a session still runs and roll it back
sub reset_session
{
	my ($s) = @_;
	if ($s->running)
	{
		$node->safe_psql('postgres', "SELECT pg_cancel_backend($s->{pid})");
		$s->wait(20);
	}
	$s->query('ROLLBACK');
}

#
# 1. Upgrade with a writer waiting in between
#
$A->query_safe('BEGIN');
$A->query_safe("SELECT zk_lock_shared('u')");
queue_request($zk, $B, "SELECT zk_lock('u', '60s')", "$LOCKS/u", 2, 'u: B queued behind A\'s shared lock');
usleep(300_000);
ok($B->running, 'u: B waits for A\'s shared lock');

my $r = $A->query("SELECT zk_lock('u', '10s')", 30);
is($r->{sqlstate}, '00000', 'u: A upgrades to the exclusive lock') or diag $r->{err};
ok($r->{elapsed} < 3, sprintf('u: promptly (%.2fs), not after a timeout', $r->{elapsed}));
my $upgraded = $r->{sqlstate} eq '00000';
sleep 1;
ok($B->running, 'u: B still waits while A holds the exclusive lock (no second exclusive holder)');
is(entries('u'), 'A:exclusive:held B:exclusive:waiting',
	'u: zk_locks: A holds the exclusive lock, B waits');
is(try_lock_elsewhere($node, 'u'), 'f', 'u: nobody else gets the lock');
is(try_lock_shared_elsewhere($node, 'u'), 'f', 'u: nor the shared lock');
if ($upgraded)
{
	my $tok = $A->query_safe("SELECT zk_lock('u')");
	is($tok, $A->query_safe("SELECT zk_lock_token('u')"),
		'u: taking it again returns the token of the exclusive hold');
}
$A->query($upgraded ? 'COMMIT' : 'ROLLBACK');
$r = $B->wait(15);
is($r->{sqlstate}, '00000', 'u: B gets the lock once A commits') or diag $r->{err};
is(entries('u'), 'B:exclusive:held', 'u: B alone holds');
reset_session($B);
ok(scalar(zk_wait_count($zk, "$LOCKS/u", 0, 10)), 'u: no node left');

#
# 2. Upgrade with a writer and a reader behind it waiting
#
$A->query_safe('BEGIN');
$A->query_safe("SELECT zk_lock_shared('r')");
queue_request($zk, $B, "SELECT zk_lock('r', '60s')", "$LOCKS/r", 2, 'r: B queued behind A');
queue_request($zk, $D, "SELECT zk_lock_shared('r', '60s')", "$LOCKS/r", 3, 'r: reader D queued behind B');
usleep(300_000);
ok($B->running && $D->running, 'r: B and D wait');

$r = $A->query("SELECT zk_lock('r', '10s')", 30);
is($r->{sqlstate}, '00000', 'r: A upgrades to the exclusive lock') or diag $r->{err};
ok($r->{elapsed} < 3, sprintf('r: promptly (%.2fs), not after a timeout', $r->{elapsed}));
$upgraded = $r->{sqlstate} eq '00000';
sleep 1;
ok($B->running, 'r: B still waits while A holds the exclusive lock');
ok($D->running, 'r: D still waits (behind B)');
is(entries('r'), 'A:exclusive:held B:exclusive:waiting D:shared:waiting',
	'r: zk_locks: A holds, B and D wait');
$A->query($upgraded ? 'COMMIT' : 'ROLLBACK');
$r = $B->wait(15);
is($r->{sqlstate}, '00000', 'r: B gets the lock once A commits') or diag $r->{err};
usleep(500_000);
ok($D->running, 'r: D still waits while B holds the exclusive lock');
reset_session($B);
$r = $D->wait(15);
is($r->{sqlstate}, '00000', 'r: D gets the shared lock once B is done') or diag $r->{err};
reset_session($D);
ok(scalar(zk_wait_count($zk, "$LOCKS/r", 0, 10)), 'r: no node left');

#
# 3. Two readers both upgrade: a certain deadlock, reported at once
#
$A->query_safe('BEGIN');
$A->query_safe("SELECT zk_lock_shared('d')");
$C->query_safe('BEGIN');
$C->query_safe("SELECT zk_lock_shared('d')");
$A->send("SELECT zk_lock('d', '15s')");
ok(scalar(zk_wait_count($zk, "$LOCKS/d", 3, 10)), 'd: A asks for the exclusive lock');
usleep(500_000);
ok($A->running, 'd: A waits for C\'s shared lock');
my $t0 = time();
$C->send("SELECT zk_lock('d', '15s')");

# the first of A and C to answer
my ($first, $other, $fr);
wait_until(
	sub {
		foreach my $s ($C, $A)
		{
			next if $s->running;
			$fr = $s->{last};
			($first, $other) = ($s, $s == $A ? $C : $A);
			return 1;
		}
		return 0;
	},
	20, 0.02);
my $elapsed = time() - $t0;
ok(defined $first, sprintf('d: one of A and C answers (after %.2fs)', $elapsed));
$first //= $C;
$other //= $A;
$fr //= { sqlstate => 'TIMEOUT', err => '' };
is($fr->{sqlstate}, '40P01', "d: $first->{name} fails with 40P01 (deadlock)") or diag $fr->{err};
ok($elapsed < 5, sprintf('d: at once (%.2fs), well before the 15 s timeout', $elapsed));
# the error aborts the failed transaction and with it its holds (as
# PostgreSQL does with its own locks): the other one gets the lock then,
# before or after the explicit ROLLBACK
$r = $other->wait(20);
is($r->{sqlstate}, '00000', "d: $other->{name} gets the exclusive lock once $first->{name} failed")
  or diag $r->{err};
ok($r->{elapsed} < 8, sprintf('d: %.2fs after asking', $r->{elapsed}));
is(join(' ', grep { !/^$other->{name}:shared:/ } split / /, entries('d')),
	"$other->{name}:exclusive:held", "d: zk_locks: $other->{name} holds, $first->{name} holds nothing");
$first->query('ROLLBACK');
reset_session($other);
reset_session($first);
ok(scalar(zk_wait_count($zk, "$LOCKS/d", 0, 10)), 'd: no node left');

#
# 4. A try that meets that deadlock is false, not 40P01: a try never waits,
#    so it is in no cycle (pg_try_advisory_xact_lock answers false too)
#
$A->query_safe('BEGIN');
$A->query_safe("SELECT zk_lock_shared('t')");
$C->query_safe('BEGIN');
$C->query_safe("SELECT zk_lock_shared('t')");
$A->send("SELECT zk_lock('t', '15s')");
ok(scalar(zk_wait_count($zk, "$LOCKS/t", 3, 10)), 't: A asks for the exclusive lock');
usleep(500_000);
ok($A->running, 't: A waits for C\'s shared lock');
foreach my $try ('zk_try_lock', 'zk_try_session_lock')
{
	$r = $C->query("SELECT $try('t')", 30);
	is($r->{sqlstate}, '00000', "t: C's $try does not fail (no 40P01)") or diag $r->{err};
	is($r->{out}, 'f', "t: C's $try is false");
}
ok($A->running, 't: A still waits');
is($C->query_safe("SELECT zk_lock_token('t') IS NOT NULL"), 't', 't: C still holds its shared lock');
ok(scalar(zk_wait_count($zk, "$LOCKS/t", 3, 10)), "t: the tries' nodes are gone");
$C->query_safe('ROLLBACK');
$r = $A->wait(20);
is($r->{sqlstate}, '00000', 't: A gets the exclusive lock once C rolled back') or diag $r->{err};
reset_session($A);
ok(scalar(zk_wait_count($zk, "$LOCKS/t", 0, 10)), 't: no node left');

#
# PostgreSQL's own advisory locks behave the same way (the reference)
#
$A->query_safe('BEGIN');
$A->query_safe('SELECT pg_advisory_xact_lock_shared(240)');
$B->query_safe('BEGIN');
$B->send('SELECT pg_advisory_xact_lock(240)');
usleep(300_000);
$r = $A->query('SELECT pg_advisory_xact_lock(240)', 30);
ok($r->{sqlstate} eq '00000' && $r->{elapsed} < 3,
	sprintf('reference: pg_advisory_xact_lock upgrades at once past a waiting writer (%.2fs)', $r->{elapsed}));
ok($B->running, 'reference: the writer still waits');
$A->query('COMMIT');
$r = $B->wait(15);
is($r->{sqlstate}, '00000', 'reference: the writer gets it after the commit');
reset_session($B);

ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'no nodes left');

$_->quit for ($A, $B, $C, $D);
$node->stop;
done_testing();
