
# 305_queue_contention.pl - consumers that find the items claimed: a try, a
# zero or short timeout and more max_items than are free, against claims of
# a local open transaction, of another cluster and of kazoo, alone and mixed
# with free items, and the worker answering throughout.
#
# The queue's most ordinary contention: one item, two consumers.  Until
# issue 21 a zk_try_dequeue that found the only item claimed by another
# local transaction made the worker go round for ever under its shared lock
# (every zklock call of every backend failed, and pg_ctl stop -m fast never
# ended).  Here every such call answers at once (no row for a try or a zero
# timeout, no row after the timeout for a short one) while zk_status()
# answers within a second on both clusters; a timeout bounds the wait for
# an item to become free, never the taking of a free one: zk_dequeue(q, '0')
# takes a free item on its first call, in a new session as in an open
# transaction.  max_items larger than what is free takes exactly what is
# free.  Once the claims are let go the same consumers get the items, each
# once, and nothing is left in ZooKeeper.  pg_ctl stop -m fast with a claim
# held and a consumer waiting ends within seconds.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my %opts = (session_timeout => '10s', connect_timeout => '3s');
my $A = zk_node('contA', $zk, %opts);
my $B = zk_node('contB', $zk, %opts);
my $Q = '/zklock/queues';

# A monitor session per cluster: zk_status() must answer within 1 s
my %mon = (A => new_session($A, name => 'monA'), B => new_session($B, name => 'monB'));
my $slow_status = 0;

sub status_answers
{
	my ($what) = @_;
	foreach my $c (sort keys %mon)
	{
		my $r = $mon{$c}->query('SELECT state FROM zk_status()', 30);
		if (!$r->{done} || $r->{sqlstate} ne '00000' || $r->{elapsed} > 1.0)
		{
			$slow_status++;
			diag sprintf("zk_status() on %s %s: %s after %.2f s (%s)", $c, $what,
				$r->{sqlstate} // 'no answer', $r->{elapsed} // -1, $r->{err} // '');
		}
	}
}

# $s runs $sql; it must answer without error within $max s; returns its output
sub answers
{
	my ($s, $sql, $max, $what) = @_;
	my $r = $s->query($sql, 30);
	ok($r->{done} && $r->{sqlstate} eq '00000' && $r->{elapsed} < $max,
		sprintf('%s answers within %.1f s (%.2f s, %s)', $what, $max,
			$r->{elapsed} // -1, $r->{sqlstate} // 'no answer'))
	  or diag $r->{err};
	status_answers("after: $what");
	return $r->{out} // '';
}

# answers() in a new session $name of $node (its first statement)
sub fresh
{
	my ($node, $name, @args) = @_;
	my $s = new_session($node, name => $name);
	my $out = answers($s, @args);
	$s->quit;
	return $out;
}

sub entries { my @l = zk_children($zk, "$Q/$_[0]/entries"); return scalar @l; }
sub taken   { my @l = zk_children($zk, "$Q/$_[0]/taken"); return scalar @l; }

my $a1 = new_session($A, name => 'a1');
my $a2 = new_session($A, name => 'a2');
my $b1 = new_session($B, name => 'b1');

# -- 1. the report: the only item claimed by another local transaction ----
$A->safe_psql('postgres', "SELECT zk_enqueue('c1', 'A')");
$a1->query_safe("BEGIN");
is($a1->query_safe("SELECT body FROM zk_dequeue('c1', '2s')"), 'A', 'a1 claims the only item');

# a new session's first statement (its transaction id is assigned by the
# dequeue itself), then in an open transaction that already has one
foreach my $round (1 .. 3)
{
	is(fresh($A, "try$round", "SELECT body FROM zk_try_dequeue('c1')", 2, "try $round, first statement"),
		'', "try $round gets no row");
}
$a2->query_safe("BEGIN; SELECT txid_current()");
is(answers($a2, "SELECT body FROM zk_try_dequeue('c1')", 2, 'try in an open transaction'),
	'', 'no row');
is(answers($a2, "SELECT count(*) FROM zk_try_dequeue('c1', 5)", 2, 'try with max_items 5'),
	'0', 'no row for five either');
is(answers($a2, "SELECT count(*) FROM zk_dequeue('c1', '0')", 2, "dequeue '0'"),
	'0', "dequeue '0' gets no row");
my $t0 = time();
is(answers($a2, "SELECT count(*) FROM zk_dequeue('c1', '300ms', 3)", 5, "dequeue '300ms'"),
	'0', "dequeue '300ms' gets no row");
cmp_ok(time() - $t0, '>=', 0.29, "... after its timeout");
$a2->query_safe("ROLLBACK");
is(fresh($A, 'zero1', "SELECT count(*) FROM zk_dequeue('c1', '0', 2)", 2, "first statement dequeue '0'"),
	'0', 'no row');
# the other cluster: no row either, at once
is(answers($b1, "SELECT count(*) FROM zk_try_dequeue('c1')", 2, 'try on B'), '0', 'B gets no row');
is(answers($b1, "SELECT count(*) FROM zk_dequeue('c1', '0')", 2, "dequeue '0' on B"), '0', 'no row');
is(entries('c1'), 1, 'the item is still in ZooKeeper');
is(taken('c1'), 1, '... with one claim');

# let go: the next try gets it
$a1->query_safe("ROLLBACK");
is(answers($a2, "SELECT body FROM zk_try_dequeue('c1')", 2, 'try after the rollback'),
	'A', 'the try gets the released item');
is(entries('c1'), 0, 'consumed: no entry left');
is(taken('c1'), 0, '... and no claim');

# -- 2. claimed items mixed with free ones -----------------------------------
$A->safe_psql('postgres',
	"BEGIN; SELECT zk_enqueue('c2', 'x' || g) FROM generate_series(1, 6) g; COMMIT");
$a1->query_safe("BEGIN");
is($a1->query_safe("SELECT string_agg(body, ',') FROM zk_dequeue('c2', '2s', 2)"),
	'x1,x2', 'a1 claims the first two');
$b1->query_safe("BEGIN");
is($b1->query_safe("SELECT string_agg(body, ',') FROM zk_dequeue('c2', '2s', 1)"),
	'x3', 'B claims the third');
{
	my $s = new_session($A, name => 'mix');
	is(answers($s, "SELECT string_agg(body, ',') FROM zk_try_dequeue('c2', 10)", 2,
			'try with max_items 10, 3 of 6 free'),
		'x4,x5,x6', 'the try takes exactly the three free items, in order');
	is(answers($s, "SELECT count(*) FROM zk_try_dequeue('c2', 10)", 2, 'try again'),
		'0', 'nothing left to take');
	is(answers($s, "SELECT count(*) FROM zk_dequeue('c2', '0', 10)", 2, "dequeue '0'"),
		'0', 'nothing');
	$s->quit;
}
# free one of a1's: a zero timeout takes it
$a1->query_safe("ROLLBACK");
is(fresh($A, 'mix2', "SELECT string_agg(body, ',') FROM zk_dequeue('c2', '0', 10)", 2,
		"dequeue '0' after a1's rollback"),
	'x1,x2', 'a zero timeout takes the free items at once');
$b1->query_safe("COMMIT");
is(entries('c2'), 0, 'every item of c2 consumed');
is(taken('c2'), 0, 'no claim left');

# -- 3. a free item and a zero timeout: taken on the first call -----------
$A->safe_psql('postgres',
	"BEGIN; SELECT zk_enqueue('c3', 'z' || g) FROM generate_series(1, 4) g; COMMIT");
foreach my $i (1 .. 3)
{
	is(fresh($A, "z$i", "SELECT body FROM zk_dequeue('c3', '0')", 2, "new session, dequeue '0' ($i)"),
		"z$i", "the first call takes z$i");
}
$a2->query_safe("BEGIN; SELECT txid_current()");
is(answers($a2, "SELECT body FROM zk_dequeue('c3', '0')", 2, "open transaction, dequeue '0'"),
	'z4', 'in an open transaction too');
$a2->query_safe("COMMIT");
{
	my $s = new_session($B, name => 'zB');
	$A->safe_psql('postgres', "SELECT zk_enqueue('c3', 'zB')");
	is(answers($s, "SELECT body FROM zk_dequeue('c3', '0')", 2, "B, dequeue '0'"),
		'zB', 'B takes it on its first call');
	$s->quit;
}

# -- 4. kazoo holds a claim ------------------------------------------------
my $kz = queue_kazoo($zk);
my $kpath = "$Q/c4";
is($kz->cmd("put $kpath 100 6b31"), 'ok', 'kazoo puts k1');
is($kz->cmd("get $kpath 5"), 'item 6b31', 'kazoo claims k1');
is(answers($a2, "SELECT count(*) FROM zk_try_dequeue('c4')", 2, 'try while kazoo holds the only item'),
	'0', 'no row');
is(answers($b1, "SELECT count(*) FROM zk_dequeue('c4', '0', 3)", 2, "dequeue '0' on B"),
	'0', 'no row');
is(answers($a2, "SELECT count(*) FROM zk_dequeue('c4', '200ms')", 5, "dequeue '200ms'"),
	'0', 'no row');
$A->safe_psql('postgres', "SELECT zk_enqueue('c4', 'k2')");
is(answers($a2, "SELECT body FROM zk_try_dequeue('c4', 5)", 2, 'try with one free beside kazoo\'s'),
	'k2', 'the try takes the free one only');
is($kz->cmd("release $kpath"), 'true', 'kazoo lets k1 go');
is(answers($b1, "SELECT encode(payload, 'escape') FROM zk_dequeue('c4', '2s')", 5,
		'B after kazoo let go'),
	'k1', 'B gets k1');
is(entries('c4'), 0, 'c4: no entry left');
is(taken('c4'), 0, 'c4: no claim left');

# a zero timeout whose first candidate kazoo has just claimed takes the
# next free item (the round lost the race; the next one offers the rest)
$A->safe_psql('postgres',
	"BEGIN; SELECT zk_enqueue('c6', 'y1'), zk_enqueue('c6', 'y2'), zk_enqueue('c6', 'y3', 500); COMMIT");
is(answers($a2, "SELECT body FROM zk_dequeue('c6', '2s')", 3, 'a waiting dequeue of c6'), 'y1',
	'A takes y1 (and keeps what its listing left)');
is($kz->cmd("get $Q/c6 5"), 'item 7932', 'kazoo claims y2 meanwhile');
is(answers($a2, "SELECT body FROM zk_dequeue('c6', '0')", 2, "dequeue '0' after kazoo's claim"),
	'y3', "the zero timeout takes y3, the one kazoo left");
is($kz->cmd("release $Q/c6"), 'true', 'kazoo lets y2 go');
is(answers($a2, "SELECT body FROM zk_try_dequeue('c6')", 2, 'try'), 'y2', 'y2 is taken once');
is(entries('c6'), 0, 'c6: nothing left');
$kz->quit;

# -- 5. many tries against one held claim, from both clusters --------------
$A->safe_psql('postgres', "SELECT zk_enqueue('c5', 'h')");
$a1->query_safe("BEGIN");
is($a1->query_safe("SELECT body FROM zk_dequeue('c5', '2s')"), 'h', 'a1 claims c5');
{
	my @s = map { new_session($_ % 2 ? $A : $B, name => "many$_") } 1 .. 6;
	$_->send("SELECT count(*) FROM zk_try_dequeue('c5')") foreach @s;
	my $bad = 0;
	foreach my $s (@s)
	{
		my $r = $s->wait(10);
		$bad++ unless $r->{done} && $r->{sqlstate} eq '00000' && $r->{out} eq '0';
	}
	is($bad, 0, 'six concurrent tries all answer no row');
	$_->quit foreach @s;
}
status_answers('after the concurrent tries');

# -- 6. pg_ctl stop -m fast with a claim held and a consumer waiting --------
$a2->send("SELECT count(*) FROM zk_dequeue('c5', '60s')");
sleep 0.5;
$t0 = time();
$A->stop('fast');
cmp_ok(time() - $t0, '<', 15, 'pg_ctl stop -m fast ends within seconds');
$_->quit foreach ($a1, $a2, $mon{A});
$A->start;
wait_for_state($A, 'connected', 60);
is(zk_wait_count($zk, "$Q/c5/taken", 0, 30), 1, 'the restarted worker releases the claim');
is($A->safe_psql('postgres', "SELECT body FROM zk_try_dequeue('c5')"), 'h',
	'the item is taken again, once');
is(entries('c5'), 0, 'c5: nothing left');

$mon{A} = new_session($A, name => 'monA2');
status_answers('at the end');
is($slow_status, 0, 'zk_status() answered within 1 s on both clusters throughout');

$b1->quit;
$_->quit foreach values %mon;
done_testing();
