
# 090_shared.pl - shared (reader) locks next to exclusive (writer) ones.
#
# Readers hold together; a writer queues behind them; a reader arriving
# after a waiting writer queues behind the writer (no writer starvation);
# grants follow arrival order; shared try-locks; session-scoped shared
# locks.  Every step is checked against ZooKeeper's own view of the nodes.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('shared', $zk,
	session_timeout => '10s',
	connect_timeout => '3s');

my $LOCKS = '/zklock/locks';
my $RW = "$LOCKS/rw";

$node->safe_psql('postgres',
	'CREATE TABLE grants (seq serial, who text, token bigint, at timestamptz)'
);

# INSERT recording the grant (its time is taken after the lock call returns)
sub grant_sql
{
	my ($who, $func, $name) = @_;
	return "INSERT INTO grants (who, token, at) SELECT '$who', $func('$name'), clock_timestamp() RETURNING token";
}


my %s;
$s{$_} = new_session($node, name => $_) foreach qw(r1 r2 r3 w r4);

#
# Three readers hold at once
#
my %tok;
foreach my $r (qw(r1 r2 r3))
{
	$s{$r}->query_safe('BEGIN');
	my $res = $s{$r}->query(grant_sql($r, 'zk_lock_shared', 'rw'), 15);
	ok($res->{done} && $res->{sqlstate} eq '00000',
		"reader $r granted at once while other readers hold")
	  or diag $res->{err};
	$tok{$r} = $res->{out};
	like($tok{$r} // '', qr/^\d+$/, "zk_lock_shared returns a bigint token for $r");
}
is(zk_count($zk, $RW), 3, 'three readers: three nodes under /zklock/locks/rw');
my @kids = zk_children($zk, $RW);
is(scalar(grep { /^[0-9a-f]{32}__rlock__\d{10}$/ } @kids), 3,
	'all three are named <32-hex-guid>__rlock__<10-digit seq>')
  or diag zk_tree($zk, $RW);
ok($tok{r1} < $tok{r2} && $tok{r2} < $tok{r3},
	"readers' tokens increase with arrival ($tok{r1}, $tok{r2}, $tok{r3})");

is(try_lock_shared_elsewhere($node, 'rw'), 't',
	'zk_try_lock_shared is true while only readers hold');
is(try_lock_elsewhere($node, 'rw'), 'f', 'zk_try_lock (exclusive) is false while readers hold');
ok(scalar(zk_wait_count($zk, $RW, 3, 5)), 'the try-locks left no node behind (still 3)');

#
# A writer queues behind the readers
#
$s{w}->query_safe('BEGIN');
$s{w}->send(grant_sql('w', 'zk_lock', 'rw'));
ok(scalar(zk_wait_count($zk, $RW, 4, 10)), 'writer has its node (4 nodes)');
is(zk_lock_modes($zk, $RW), 'shared,shared,shared,exclusive', 'queue: three readers, then the writer');
sleep 1;
ok($s{w}->running, 'writer waits while readers hold');

is(try_lock_shared_elsewhere($node, 'rw'), 'f',
	'zk_try_lock_shared is false while a writer waits ahead');
ok(scalar(zk_wait_count($zk, $RW, 4, 5)), 'the failed shared try-lock left no node (4 nodes)');

#
# A reader arriving after the waiting writer queues behind it
#
$s{r4}->query_safe('BEGIN');
$s{r4}->send(grant_sql('r4', 'zk_lock_shared', 'rw'));
ok(scalar(zk_wait_count($zk, $RW, 5, 10)), 'late reader has its node (5 nodes)');
is(zk_lock_modes($zk, $RW), 'shared,shared,shared,exclusive,shared',
	'queue: three readers, the writer, the late reader');
sleep 1;
ok($s{r4}->running, 'late reader waits although only readers hold (no writer starvation)');
ok($s{w}->running, 'writer still waits');

# releasing two of the three readers is not enough for the writer
$s{r1}->query_safe('COMMIT');
$s{r2}->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $RW, 3, 5)), 'two readers released (3 nodes)');
sleep 1;
ok($s{w}->running, 'writer still waits while one reader holds');
ok($s{r4}->running, 'late reader still waits');

# the last reader goes: the writer gets it, the late reader does not
$s{r3}->query_safe('COMMIT');
my $rw = $s{w}->wait(15);
ok($rw->{done}, 'writer granted once all earlier readers released');
is($rw->{sqlstate}, '00000', 'writer got no error') or diag $rw->{err};
$tok{w} = $rw->{out};
ok(scalar(zk_wait_count($zk, $RW, 2, 5)), 'writer and late reader left (2 nodes)');
sleep 1;
ok($s{r4}->running, 'late reader still waits while the writer holds');
is(try_lock_shared_elsewhere($node, 'rw'), 'f', 'zk_try_lock_shared is false while a writer holds');

$s{w}->query_safe('COMMIT');
my $r4 = $s{r4}->wait(15);
ok($r4->{done}, 'late reader granted after the writer commits');
is($r4->{sqlstate}, '00000', 'late reader got no error') or diag $r4->{err};
$tok{r4} = $r4->{out};
is(zk_count($zk, $RW), 1, 'only the late reader has a node now');
is(try_lock_shared_elsewhere($node, 'rw'), 't', 'another reader may join it');
$s{r4}->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $RW, 0, 5)), 'no nodes left under rw');

is($node->safe_psql('postgres', q{SELECT string_agg(who, ',' ORDER BY at) FROM grants}),
	'r1,r2,r3,w,r4', 'grants happened in arrival order');
ok($tok{r3} < $tok{w} && $tok{w} < $tok{r4},
	"tokens increase: last reader $tok{r3} < writer $tok{w} < late reader $tok{r4}");

#
# Several readers waiting for one writer are all granted when it goes
#
$node->safe_psql('postgres', 'TRUNCATE grants');
my $wq = new_session($node, name => 'wq');
$wq->query_safe('BEGIN');
$wq->query_safe(grant_sql('w1', 'zk_lock', 'q'));
is(try_lock_shared_elsewhere($node, 'q'), 'f', 'zk_try_lock_shared is false while a writer holds');
foreach my $r (qw(r1 r2))
{
	$s{$r}->query_safe('BEGIN');
	$s{$r}->send(grant_sql($r, 'zk_lock_shared', 'q'));
}
ok(scalar(zk_wait_count($zk, "$LOCKS/q", 3, 10)), 'two readers queue behind the writer (3 nodes)');
# a second writer behind the two readers, and a reader behind that writer
$s{w}->query_safe('BEGIN');
$s{w}->send(grant_sql('w2', 'zk_lock', 'q'));
ok(scalar(zk_wait_count($zk, "$LOCKS/q", 4, 10)), 'second writer queued (4 nodes)');
$s{r3}->query_safe('BEGIN');
$s{r3}->send(grant_sql('r3', 'zk_lock_shared', 'q'));
ok(scalar(zk_wait_count($zk, "$LOCKS/q", 5, 10)), 'third reader queued behind it (5 nodes)');
is(zk_lock_modes($zk, "$LOCKS/q"), 'exclusive,shared,shared,exclusive,shared', 'queue W R R W R');
sleep 1;
ok($s{r1}->running && $s{r2}->running && $s{w}->running && $s{r3}->running,
	'all four wait while the first writer holds');

$wq->query_safe('COMMIT');
my $q1 = $s{r1}->wait(15);
my $q2 = $s{r2}->wait(15);
is($q1->{sqlstate}, '00000', 'first waiting reader granted when the writer commits') or diag $q1->{err};
is($q2->{sqlstate}, '00000', 'second waiting reader granted at the same time') or diag $q2->{err};
sleep 1;
ok($s{w}->running, 'second writer waits for both readers');
ok($s{r3}->running, 'reader behind the second writer keeps waiting');

$s{r1}->query_safe('COMMIT');
sleep 1;
ok($s{w}->running, 'second writer still waits for the remaining reader');
$s{r2}->query_safe('COMMIT');
my $qw = $s{w}->wait(15);
is($qw->{sqlstate}, '00000', 'second writer granted after both readers released') or diag $qw->{err};
sleep 1;
ok($s{r3}->running, 'last reader waits for the second writer');
$s{w}->query_safe('COMMIT');
my $q3 = $s{r3}->wait(15);
is($q3->{sqlstate}, '00000', 'last reader granted after the second writer commits') or diag $q3->{err};
$s{r3}->query_safe('COMMIT');
like($node->safe_psql('postgres', q{SELECT string_agg(who, ',' ORDER BY at) FROM grants}),
	qr/^w1,(r1,r2|r2,r1),w2,r3$/, 'mixed queue granted in arrival order (the two readers together)');
ok(scalar(zk_wait_count($zk, "$LOCKS/q", 0, 5)), 'no nodes left under q');

#
# Writer behind writer behind reader: each writer waits for its immediate
# predecessor, whatever its kind
#
$node->safe_psql('postgres', 'TRUNCATE grants');
$s{r1}->query_safe('BEGIN');
$s{r1}->query_safe(grant_sql('r1', 'zk_lock_shared', 'ww'));
$s{w}->query_safe('BEGIN');
$s{w}->send(grant_sql('w1', 'zk_lock', 'ww'));
ok(scalar(zk_wait_count($zk, "$LOCKS/ww", 2, 10)), 'first writer queued behind a reader');
$wq->query_safe('BEGIN');
$wq->send(grant_sql('w2', 'zk_lock', 'ww'));
ok(scalar(zk_wait_count($zk, "$LOCKS/ww", 3, 10)), 'second writer queued behind the first');
sleep 1;
ok($s{w}->running && $wq->running, 'both writers wait');
$s{r1}->query_safe('COMMIT');
my $ww1 = $s{w}->wait(15);
is($ww1->{sqlstate}, '00000', 'first writer granted when the reader commits') or diag $ww1->{err};
sleep 1;
ok($wq->running, 'second writer still waits for the first');
is(try_lock_elsewhere($node, 'ww'), 'f', 'zk_try_lock false while writers hold and wait');
$s{w}->query_safe('COMMIT');
my $ww2 = $wq->wait(15);
is($ww2->{sqlstate}, '00000', 'second writer granted when the first commits') or diag $ww2->{err};
$wq->query_safe('COMMIT');
is($node->safe_psql('postgres', q{SELECT string_agg(who, ',' ORDER BY at) FROM grants}),
	'r1,w1,w2', 'writers granted in arrival order');
ok($ww1->{out} < $ww2->{out}, "writers' tokens increase ($ww1->{out}, $ww2->{out})");
ok(scalar(zk_wait_count($zk, "$LOCKS/ww", 0, 5)), 'no nodes left under ww');

#
# zk_try_lock_shared holds until the end of the transaction
#
$s{r1}->query_safe('BEGIN');
is($s{r1}->query_safe("SELECT zk_try_lock_shared('tls')"), 't', 'zk_try_lock_shared on a free name is true');
my @tn = zk_lock_nodes($zk, "$LOCKS/tls");
is(join(',', map { $_->{mode} } @tn), 'shared', 'it keeps one shared node');
is(try_lock_elsewhere($node, 'tls'), 'f', 'the shared try-lock excludes writers');
is(try_lock_shared_elsewhere($node, 'tls'), 't', 'but not readers');
$s{r1}->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/tls", 0, 5)), 'shared try-lock released at COMMIT');
is(try_lock_elsewhere($node, 'tls'), 't', 'and the name is free for a writer');

#
# Session-scope shared locks
#
my $ss1 = $s{r1}->query_safe("SELECT zk_session_lock_shared('ss')");
like($ss1, qr/^\d+$/, 'zk_session_lock_shared returns a token');
is($s{r2}->query_safe("SELECT zk_try_session_lock_shared('ss')"), 't',
	'zk_try_session_lock_shared by another session is true while a reader holds');
is(zk_lock_modes($zk, "$LOCKS/ss"), 'shared,shared', 'two shared nodes');
# across transactions (each statement above committed on its own)
$s{r1}->query_safe('BEGIN; SELECT 1; COMMIT');
$s{r2}->query_safe('BEGIN; SELECT 1; ROLLBACK');
is(zk_count($zk, "$LOCKS/ss"), 2, 'session shared locks survive COMMIT and ROLLBACK');
is(try_lock_elsewhere($node, 'ss'), 'f', 'they exclude writers');
is(try_lock_shared_elsewhere($node, 'ss'), 't', 'but not readers');
is($s{r3}->query_safe("SELECT zk_try_session_lock('ss')"), 'f',
	'zk_try_session_lock (exclusive) is false while readers hold');
is(zk_count($zk, "$LOCKS/ss"), 2, 'failed session try-lock left no node');

# zk_unlock (exclusive) does not release a shared hold
my $ux = $s{r1}->query("SELECT zk_unlock('ss')");
is($ux->{out}, 'f', 'zk_unlock on a lock held only in shared mode is false');
like($ux->{err}, qr/WARNING/, 'with a WARNING');
is(zk_count($zk, "$LOCKS/ss"), 2, 'and the shared hold stays');

# a writer waits for both session readers
$s{w}->send("SELECT zk_session_lock('ss')");
ok(scalar(zk_wait_count($zk, "$LOCKS/ss", 3, 10)), 'session writer queued (3 nodes)');
is($s{r1}->query_safe("SELECT zk_unlock_shared('ss')"), 't', 'zk_unlock_shared by the first reader is true');
ok(scalar(zk_wait_count($zk, "$LOCKS/ss", 2, 5)), 'its node is gone (2 nodes)');
sleep 1;
ok($s{w}->running, 'session writer still waits for the second reader');
is($s{r2}->query_safe("SELECT zk_unlock_shared('ss')"), 't', 'zk_unlock_shared by the second reader is true');
my $sw = $s{w}->wait(15);
is($sw->{sqlstate}, '00000', 'session writer granted when both readers unlocked') or diag $sw->{err};
ok($sw->{out} =~ /^\d+$/ && $sw->{out} > $ss1, 'with a larger token');
is(zk_lock_modes($zk, "$LOCKS/ss"), 'exclusive', 'one exclusive node left');
my $us = $s{r1}->query("SELECT zk_unlock_shared('ss')");
is($us->{out}, 'f', 'zk_unlock_shared when no longer holding it is false');
like($us->{err}, qr/WARNING/, 'with a WARNING');
is($s{w}->query_safe("SELECT zk_unlock('ss')"), 't', 'the writer unlocks');
ok(scalar(zk_wait_count($zk, "$LOCKS/ss", 0, 5)), 'no nodes left under ss');

#
# A shared lock taken inside a savepoint goes with ROLLBACK TO SAVEPOINT
#
$s{r1}->query_safe('BEGIN');
$s{r1}->query_safe("SELECT zk_lock_shared('sp_outer')");
$s{r1}->query_safe('SAVEPOINT a');
$s{r1}->query_safe("SELECT zk_lock_shared('sp_inner')");
is(try_lock_elsewhere($node, 'sp_inner'), 'f', 'shared lock taken in a savepoint excludes writers');
$s{r1}->query_safe('ROLLBACK TO SAVEPOINT a');
ok(scalar(zk_wait_count($zk, "$LOCKS/sp_inner", 0, 5)), 'ROLLBACK TO SAVEPOINT removes its node');
is(try_lock_elsewhere($node, 'sp_inner'), 't', 'and frees it');
is(try_lock_elsewhere($node, 'sp_outer'), 'f', 'the shared lock taken before the savepoint stays');
$s{r1}->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/sp_outer", 0, 5)), 'released at COMMIT');

#
# Timeouts of shared requests: explicit, and lock_timeout
#
$wq->query_safe('BEGIN');
$wq->query_safe("SELECT zk_lock('to')");
my $to = $s{r1}->query("SELECT zk_lock_shared('to', '1s')", 30);
is($to->{sqlstate}, '55P03', 'zk_lock_shared with a timeout fails with 55P03 while a writer holds')
  or diag $to->{err};
ok($to->{elapsed} < 10, sprintf('after about the timeout (%.1fs)', $to->{elapsed}));
$s{r1}->query_safe("SET lock_timeout = '1s'");
$to = $s{r1}->query("SELECT zk_session_lock_shared('to')", 30);
is($to->{sqlstate}, '55P03', 'zk_session_lock_shared without a timeout uses lock_timeout (55P03)')
  or diag $to->{err};
$s{r1}->query_safe('RESET lock_timeout');
ok(scalar(zk_wait_count($zk, "$LOCKS/to", 1, 5)), 'the timed-out requests left no node');
$wq->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/to", 0, 5)), 'released');

#
# Shared lock by bigint key
#
$s{r1}->query_safe('BEGIN');
$s{r1}->query_safe('SELECT zk_lock_shared(7)');
is(zk_lock_modes($zk, "$LOCKS/7"), 'shared', 'zk_lock_shared(7) has a shared node under /zklock/locks/7');
is(try_lock_shared_elsewhere($node, '7'), 't', "zk_try_lock_shared('7') shares it");
is(try_lock_elsewhere($node, '7'), 'f', "zk_try_lock('7') conflicts with it");
$s{r1}->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, "$LOCKS/7", 0, 5)), 'released at COMMIT');

$_->quit foreach values %s;
$wq->quit;
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper at the end');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'zk_status().entries_used back to 0');

$node->stop;
done_testing();
