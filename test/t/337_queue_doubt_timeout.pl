
# 337_queue_doubt_timeout.pl - a dequeue whose timeout passes while its
# claim is in doubt never lets its transaction consume that item.
#
# A consumer on cluster A (through the fault proxy) waits on an empty
# queue; cluster B (straight to ZooKeeper) publishes an item; A's worker
# sends the claim multi, it lands in ZooKeeper and the proxy cuts the
# connection before the reply and refuses new ones.  The dequeue's timeout
# passes meanwhile.  Until issue 22 it returned no row, the transaction
# committed other work, and after a restart of A while ZooKeeper was
# still unreachable the crash resolution found a claim naming a committed
# transaction and consumed the item: nobody ever received it.  Now the
# call returns no row only once the worker has withdrawn it (no claim of
# it left), else fails with 08006 after zklock.connect_timeout, so the
# transaction cannot commit with the claim; after the restart the item is
# released and taken once, by B.  The same with PREPARE TRANSACTION: it
# cannot follow a dequeue whose claim is in doubt.  A plain timeout (no
# doubt) still returns no row after its timeout.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
my $A = zk_node('doubtA', $p->{hosts},
	session_timeout => '20s',
	connect_timeout => '3s',
	conf => "max_prepared_transactions = 4\nzklock.commit_timeout = '3s'\n");
my $B = zk_node('doubtB', $zk, session_timeout => '10s', connect_timeout => '3s');
my $Q = '/zklock/queues';

sub entries { my @l = zk_children($zk, "$Q/$_[0]/entries"); return scalar @l; }
sub taken   { my @l = zk_children($zk, "$Q/$_[0]/taken"); return scalar @l; }

$A->safe_psql('postgres', 'CREATE TABLE work (note text)');

# a plain timeout: no row, after the timeout
{
	my $t0 = time();
	is($A->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('dq0', '300ms')"), '0',
		'a plain timeout: no row');
	my $el = time() - $t0;
	ok($el >= 0.29 && $el < 3, sprintf('... after its timeout (%.2f s)', $el));
}

# The scenario: A waits, B publishes, A's claim lands and its reply is lost
sub doubt_round
{
	my ($queue, $finish) = @_;
	my $c = new_session($A, name => "cons_$queue");
	$c->query_safe("BEGIN; INSERT INTO work VALUES ('$queue')");
	$c->send("SELECT count(*) FROM zk_dequeue('$queue', '2s')");
	sleep 0.5;
	ok($c->running, "$queue: the consumer waits on the empty queue");
	my $cut = proxy_rule($p, 'cut-after-request multi');
	proxy_cmd($p, 'refuse 120');
	$B->safe_psql('postgres', "SELECT zk_enqueue('$queue', 'item-$queue')");
	ok(proxy_wait_fired($p, $cut, 10), "$queue: the claim multi landed and its reply was cut");
	is(taken($queue), 1, "$queue: ZooKeeper holds A's claim");
	my $r = $c->wait(30);
	ok($r->{done}, "$queue: the dequeue answered");
	isnt($r->{sqlstate}, '00000', "$queue: it did not return 'no row' while its claim was in doubt")
	  or diag "out: $r->{out}";
	is($r->{sqlstate}, '08006', "$queue: it failed with 08006");
	like($r->{err}, qr/could not withdraw a dequeue|zookeeper|connection/i, "$queue: saying why");
	# the transaction is aborted: COMMIT and PREPARE end it as a rollback
	my $end = $c->query($finish, 30);
	ok($end->{done}, "$queue: $finish answers");
	$c->quit;

	# restart A while ZooKeeper is still unreachable, then heal
	$A->restart;
	proxy_cmd($p, 'reset');
	wait_for_state($A, 'connected', 60);
	is(zk_wait_count($zk, "$Q/$queue/taken", 0, 30), 1, "$queue: the claim is released");
	is(entries($queue), 1, "$queue: the item is still there");
	is($B->safe_psql('postgres', "SELECT body FROM zk_try_dequeue('$queue')"), "item-$queue",
		"$queue: B takes it, once");
	is(entries($queue), 0, "$queue: nothing left");
	is($A->safe_psql('postgres', "SELECT count(*) FROM work WHERE note = '$queue'"), '0',
		"$queue: the consumer's transaction did not commit");
}

# the worker stopped (SIGSTOP) while a dequeue waits on an empty queue: its
# timeout passes with nothing out, and it returns no row on time instead of
# waiting for the worker
{
	my $pid = worker_pid($A);
	my $c = new_session($A, name => 'stopped');
	$c->send("SELECT count(*) FROM zk_dequeue('dqs', '1s')");
	sleep 0.5;
	kill 'STOP', $pid;
	my $r = $c->wait(30);
	kill 'CONT', $pid;
	ok($r->{done} && $r->{sqlstate} eq '00000' && $r->{out} eq '0',
		'a dequeue that times out while the worker is stopped returns no row')
	  or diag explain $r;
	cmp_ok($r->{elapsed}, '<', 2.5, sprintf('... on time (%.2f s)', $r->{elapsed} // -1));
	$c->quit;
}

# a try that arrives while a round's listing is out answers from a listing
# sent after it arrived: with A's listings delayed by 0.8 s, a waiter on A
# and two items published on B, the try on A gets the item the waiter
# does not
{
	my $w = new_session($A, name => 'late_w');
	$w->send("BEGIN; SELECT body FROM zk_dequeue('dql', '20s')");
	sleep 0.5;
	proxy_cmd($p, 'delay-replies getChildren 800');
	proxy_cmd($p, 'delay-replies getChildren2 800');
	$B->safe_psql('postgres', "SELECT zk_enqueue('dql', 'X'); SELECT zk_enqueue('dql', 'Y')");
	sleep 0.3;
	my $t = new_session($A, name => 'late_t');
	my $r = $t->query("SELECT body FROM zk_try_dequeue('dql')", 30);
	my $rw = $w->wait(30);
	proxy_cmd($p, 'reset');
	is(join(',', sort grep { $_ ne '' } ($r->{out} // '', $rw->{out} // '')), 'X,Y',
		'the late try and the waiter each get one of the two free items')
	  or diag explain [ $r, $rw ];
	$w->query('COMMIT', 10);
	is(entries('dql'), 0, 'both consumed');
	$_->quit foreach ($w, $t);
}

doubt_round('dq1', 'COMMIT');
doubt_round('dq2', "PREPARE TRANSACTION 'dq2'");
is($A->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
	'no prepared transaction was left');

done_testing();
