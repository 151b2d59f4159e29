# 364_publish_mark_unflushed.pl - a producer's COMMIT writes its transaction
# node before the transaction's WAL mark is flushed (issue 40: the mark is
# made durable by the commit record's flush, not by one of its own), so the
# node can be in ZooKeeper before the mark is on disk.  A crash in that window must publish nothing: the mark
# never becomes durable, nor does the commit record after it, and the
# settling pass of the next start drops the node (src/README, section 5,
# "The WAL mark").
#
# The window is held open with commit_delay (with commit_siblings = 0 and
# fsync on, every WAL flush of the session first waits that long, holding
# WALWriteLock):
# COMMIT is sent, the backend is stopped inside the commit record's flush
# (which also makes the mark durable), and the attempt counts as "in the
# window" when ZooKeeper has the transaction node while the flushed WAL ends
# before the mark the node names.  Then the
# backend is SIGKILLed: PostgreSQL restarts after a crash.  Every attempt,
# in the window or not, must end with the item in the queue exactly when
# the row written by the same transaction is in the table.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('mark', $zk, session_timeout => '6s', connect_timeout => '3s',
	conf => "restart_after_crash = on\nfsync = on\n");
my $TXNS = '/zklock/txns';
$node->safe_psql('postgres', 'CREATE TABLE produced (k int PRIMARY KEY)');

# pg_lsn text -> number
sub lsn_num
{
	my ($t) = @_;
	my ($hi, $lo) = split m{/}, $t;
	return hex($hi) * 4294967296 + hex($lo);
}

# the transaction nodes now: { name => start of the mark they name }
sub txn_marks
{
	my %m;
	my $ls = zkq($zk, 'ls', $TXNS) // '';
	for my $c (grep { /\S/ } split /\n/, $ls)
	{
		my $hex = zkq($zk, 'hex', "$TXNS/$c") // '';
		next if length($hex) < 112;
		my $bytes = pack('H*', $hex);
		# ZkTxnHeader: magic, nitems, sysid, fxid, lsn, tli, total, run, rec
		my @f = unpack('V V Q< Q< Q< V V Q< Q<', $bytes);
		$m{$c} = $f[8];
	}
	return \%m;
}

# with the same delay, a COMMIT left alone publishes its item
{
	my $s = new_session($node, name => 'control');
	$s->query_safe('SET commit_delay = 100000');
	$s->query_safe('SET commit_siblings = 0');
	$s->query_safe('BEGIN');
	$s->query_safe('INSERT INTO produced VALUES (0)');
	$s->query_safe("SELECT zk_enqueue('marked', '0'::bytea)");
	$s->query_safe('COMMIT');
	is($node->safe_psql('postgres', "SELECT count(*) FROM zk_queue_peek('marked', 100) WHERE body = '0'"),
		'1', 'a COMMIT through the delayed flush publishes its item');
	$s->quit;
}

my ($hits, $attempts) = (0, 0);
for my $k (1 .. 6)
{
	$attempts++;
	my $s = new_session($node, name => "producer$k");
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	chomp $pid;
	$s->query_safe('SET commit_delay = 100000');
	$s->query_safe('SET commit_siblings = 0');
	$s->query_safe('BEGIN');
	$s->query_safe("INSERT INTO produced VALUES ($k)");
	$s->query_safe("SELECT zk_enqueue('marked', '$k'::bytea)");
	$s->send('COMMIT');
	# into the commit record's flush (commit_delay: 100 ms), past the node's create
	sleep(0.02 + 0.01 * $k);
	kill 'STOP', $pid;
	my $flushed = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
	my $marks = txn_marks();
	my $in_window = grep { $_ >= $flushed } values %$marks;
	$hits++ if $in_window;
	note sprintf('attempt %d: %d transaction node(s), flushed WAL ends at %d, marks at %s: %s',
		$k, scalar(keys %$marks), $flushed, join(',', values %$marks) || '-',
		$in_window ? 'in the window' : 'not in the window');
	kill 'KILL', $pid;
	kill 'CONT', $pid;
	my $r = $s->wait(30);
	isnt($r->{sqlstate}, '00000', "attempt $k: the killed COMMIT did not report success");
	$s->quit;

	# the crash restart, the worker back, the node settled
	ok(wait_until(sub { eval { $node->safe_psql('postgres', 'SELECT 1') } }, 60), "attempt $k: PostgreSQL is back");
	wait_for_state($node, 'connected', 30);
	ok(wait_until(sub { (zkq($zk, 'ls', $TXNS) // 'x') eq '' }, 60),
		"attempt $k: the transaction node was settled");
	my $row = $node->safe_psql('postgres', "SELECT count(*) FROM produced WHERE k = $k");
	my $items = $node->safe_psql('postgres',
		"SELECT count(*) FROM zk_queue_peek('marked', 100) WHERE body = '$k'");
	is($items, $row, "attempt $k: the item is in the queue exactly when its transaction's row is ($row)");
	is($row, '0', "attempt $k: a transaction in the window did not commit") if $in_window;
}
note "$hits of $attempts attempts stopped the backend with the transaction node written and its mark not flushed";
cmp_ok($hits, '>=', 1, 'the window was hit at least once (the node is written before the mark is flushed)');

# what committed before is still delivered once, and nothing else
my $n = $node->safe_psql('postgres', 'SELECT count(*) FROM produced');
is($node->safe_psql('postgres', "SELECT count(*) FROM zk_queue_peek('marked', 100)"), $n,
	'as many items as committed transactions');
$node->stop;
done_testing();
