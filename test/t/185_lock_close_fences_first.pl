
# 185_lock_close_fences_first.pl - when the worker closes its session (it is
# terminated, zklock.hosts changes), its locks count as lost before the
# close reaches ZooKeeper: a COMMIT can never succeed once another server
# holds the lock.
#
# A holds lock x in an open transaction; B waits for it.  The proxy in
# front of A holds ZooKeeper's answer to closeSession for 3 s, so A's
# terminated worker sits in zookeeper_close while ZooKeeper has already
# deleted A's node and granted x to B.  The fault run found A's COMMIT
# succeeding in that window (two holders): the worker marked its entries
# lost only after zookeeper_close returned.  Now A's COMMIT fails (40001).

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
my $A = zk_node('closeA', $p->{hosts}, session_timeout => '10s', connect_timeout => '5s',
	conf => "zklock.commit_timeout = '3s'\n");
my $B = zk_node('closeB', $zk, session_timeout => '10s', connect_timeout => '5s');

foreach my $how ('terminate', 'reload')
{
	my $name = "x_$how";
	my $a = new_session($A, name => "holder_$how");
	$a->query_safe("BEGIN; SELECT zk_lock('$name')");
	my $b = new_session($B, name => "waiter_$how");
	$b->send("SELECT zk_lock('$name', '20s')");
	sleep 0.3;
	ok($b->running, "$how: B waits for the lock A holds");
	proxy_cmd($p, 'delay-replies closeSession 3000');
	if ($how eq 'terminate')
	{
		my $pid = worker_pid($A);
		$A->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	}
	else
	{
		# straight to ZooKeeper: a new session; the old one closes through the proxy
		$A->safe_psql('postgres',
			"ALTER SYSTEM SET zklock.hosts = '$zk->{hosts}'; SELECT pg_reload_conf()");
	}
	my $rb = $b->wait(15);
	ok($rb->{done} && $rb->{sqlstate} eq '00000', "$how: B got the lock once A's session closed")
	  or diag explain $rb;
	my $ra = $a->query('COMMIT', 15);
	isnt($ra->{sqlstate}, '00000', "$how: A's COMMIT does not succeed while B holds the lock")
	  or diag explain $ra;
	proxy_cmd($p, 'reset');
	$b->query_safe('SELECT 1');
	$_->quit for ($a, $b);
	wait_for_state($A, 'connected', 60);
}

$A->stop('fast');
$B->stop('fast');
done_testing();
