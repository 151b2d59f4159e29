
# 331_queue_noauth.pl - queue requests ZooKeeper refuses (issue 35, items 7
# and 8).
#
# 1. Cluster B has other credentials than cluster A, whose nodes are
#    private: its run registration is refused, and an enqueue's COMMIT, a
#    dequeue fail with 42501 naming the path, at once (not 08006 after the
#    timeout); counted in noauth_refusals.
# 2. In cluster A, queue q2's entries get an ACL of another identity
#    (kazoo, set_acls): a dequeue, zk_queue_length, zk_queue_peek and
#    zk_queue_purge fail with 42501 naming the path, each within ~1 s,
#    counted; so does zk_queue_drop of an empty queue whose node has such an
#    ACL.
# 3. A child node under a claimed item (a client with credentials): the
#    consumer's COMMIT returns, the consume is refused (ZNOTEMPTY): a
#    WARNING names the item, zk_status().consumes_blocked is 1 and zk_errors
#    counts it, the item and the claim stay, no other dequeue gets the item
#    (exactly once), and the worker does not spin (its CPU time over 5 s
#    stays low).  Once the child is deleted the consume completes by itself.
# 4. The same with the delete refused (NOAUTH on entries): logged, counted in
#    noauth_refusals, consumed once the ACL is given back.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX qw(sysconf _SC_CLK_TCK);
use ZkLockTest;

my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();



# CPU seconds (user + system) a process used so far
sub cpu_seconds
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return undef;
	my $line = <$fh>;
	close $fh;
	$line =~ s/^.*\) //;
	my @f = split / /, $line;
	return ($f[11] + $f[12]) / sysconf(_SC_CLK_TCK);
}

# run $sql, expect 42501 naming $path within $secs
sub refused_at_once
{
	my ($node, $sql, $path, $what, $secs) = @_;
	my $t0 = time();
	my $r = one_shot($node, $sql, 30);
	my $el = time() - $t0;
	is($r->{sqlstate}, '42501', "$what: 42501") or diag $r->{err};
	like($r->{err}, qr/zookeeper refused access to "\Q$path\E/, "$what: names $path");
	ok($el < $secs, sprintf("$what: at once (%.2fs)", $el));
}

my $kz = auth_kazoo($zk, 'zkl:secret');
my $other = auth_kazoo($zk, 'other:pw');    # the identity the ACLs below name
my $A = zk_node('qa', $zk,
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.auth_file = '" . write_mode_file("$tmp/a.auth", "zkl:secret\n", 0600) . "'\n");
$A->safe_psql('postgres', "SELECT zk_enqueue('q1', 'one')");

#
# 1. other credentials: the run is refused, so is every queue request
#
my $B = zk_node('qb', $zk,
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.auth_file = '" . write_mode_file("$tmp/b.auth", "intruder:guess\n", 0600) . "'\n");
ok(wait_until(sub { $B->log_contains(qr/refused access to "\/zklock\/runs/) }, 20),
	"B's run registration is refused");
my $before = zk_status($B)->{noauth_refusals};
refused_at_once($B, "BEGIN; SELECT zk_enqueue('q1', 'x'); COMMIT", '/zklock/runs',
	"B's enqueue", 2);
refused_at_once($B, "SELECT * FROM zk_dequeue('q1', '5s')", '/zklock/runs',
	"B's dequeue", 2);
ok(zk_status($B)->{noauth_refusals} >= $before + 2, 'counted in noauth_refusals');
$B->stop;

#
# 2. a queue whose entries this cluster may not read
#
$A->safe_psql('postgres', "SELECT zk_enqueue('q2', 'two')");
is($kz->cmd('setacl /zklock/queues/q2/entries other:pw'), 'ok',
	"kazoo gives q2's entries another identity's ACL");
$before = zk_status($A)->{noauth_refusals};
refused_at_once($A, "SELECT * FROM zk_dequeue('q2', '5s')", '/zklock/queues/q2/entries',
	'dequeue', 1.5);
refused_at_once($A, "SELECT zk_queue_length('q2')", '/zklock/queues/q2', 'length', 1.5);
refused_at_once($A, "SELECT * FROM zk_queue_peek('q2')", '/zklock/queues/q2', 'peek', 1.5);
refused_at_once($A, "SELECT zk_queue_purge('q2')", '/zklock/queues/q2', 'purge', 1.5);
# an empty queue whose node this cluster may not read nor delete under
$A->safe_psql('postgres', "SELECT zk_enqueue('q2e', 'x')");
$A->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('q2e', '5s')");
is($kz->cmd('setacl /zklock/queues/q2e other:pw'), 'ok', "q2e's node gets another identity's ACL");
refused_at_once($A, "SELECT zk_queue_drop('q2e')", '/zklock/queues/q2e', 'drop', 1.5);
ok(zk_status($A)->{noauth_refusals} >= $before + 5,
	'all counted in noauth_refusals (' . zk_status($A)->{noauth_refusals} . ')');

#
# 3. a child under a claimed item
#
my $wpid = worker_pid($A);
$A->safe_psql('postgres', "SELECT zk_enqueue('q3', 'three')");
my $s1 = new_session($A, name => 's1');
$s1->query_safe('BEGIN');
is($s1->query_safe("SELECT convert_from(payload, 'UTF8') FROM zk_dequeue('q3', '5s')"),
	'three', 's1 dequeues the item');
my ($item) = ($kz->cmd('ls /zklock/queues/q3/entries') // '') =~ /^ls (\S+)$/;
is($kz->cmd("create /zklock/queues/q3/entries/$item/child"), 'ok',
	'a client with credentials creates a child under the item');
my $errs = zk_status($A)->{zk_errors};
my $r = $s1->query('COMMIT', 30);
is($r->{sqlstate}, '00000', "the consumer's COMMIT returns");
ok( wait_until(
		sub {
			$A->log_contains(
				qr/WARNING:.*refused to consume queue claims of "q3": node "\/zklock\/queues\/q3\/entries\/\Q$item\E" has children/
			);
		},
		10),
	'a WARNING names the item');
ok($A->log_contains(qr/HINT:.*Delete the nodes under/), 'with a hint');
ok(wait_until(sub { (zk_status($A)->{consumes_blocked} // 0) == 1 }, 10),
	'zk_status().consumes_blocked is 1');
ok(zk_status($A)->{zk_errors} > $errs, 'zk_errors counts it');
my $cpu0 = cpu_seconds($wpid);
sleep 5;
my $cpu = cpu_seconds($wpid) - $cpu0;
ok($cpu < 0.5, sprintf('the worker does not spin: %.2f s of CPU in 5 s', $cpu));
is($kz->cmd('ls /zklock/queues/q3/taken'), "ls $item", 'the claim stays');
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_dequeue('q3', '1s')"), '0',
	'no other dequeue gets the item (exactly once)');
is($kz->cmd("delete /zklock/queues/q3/entries/$item/child"), 'ok', 'the child is deleted');
ok( wait_until(
		sub {
			($kz->cmd('ls /zklock/queues/q3/entries') // '') eq 'ls -'
			  && ($kz->cmd('ls /zklock/queues/q3/taken') // '') eq 'ls -';
		},
		40),
	'then the consume completes by itself: item and claim gone');
ok(wait_until(sub { (zk_status($A)->{consumes_blocked} // -1) == 0 }, 10),
	'consumes_blocked is 0 again');

#
# 4. the consume's delete refused for want of permission
#
$A->safe_psql('postgres', "SELECT zk_enqueue('q4', 'four')");
$s1->query_safe('BEGIN');
is($s1->query_safe("SELECT convert_from(payload, 'UTF8') FROM zk_dequeue('q4', '5s')"),
	'four', 's1 dequeues from q4');
is($kz->cmd('setacl /zklock/queues/q4/entries other:pw'), 'ok',
	"kazoo gives q4's entries another identity's ACL");
$before = zk_status($A)->{noauth_refusals};
is($s1->query('COMMIT', 30)->{sqlstate}, '00000', 'the COMMIT returns');
ok( wait_until(
		sub {
			$A->log_contains(
				qr/WARNING:.*refused access to "\/zklock\/queues\/q4\/entries\/[^"]+" when consuming queue claims of "q4"/);
		},
		10),
	'the refused consume is logged');
ok(zk_status($A)->{noauth_refusals} > $before, 'counted in noauth_refusals');
$cpu0 = cpu_seconds($wpid);
sleep 3;
$cpu = cpu_seconds($wpid) - $cpu0;
ok($cpu < 0.4, sprintf('no spin: %.2f s of CPU in 3 s', $cpu));
# a digest ACL of the cluster's own identity gives it back
is($other->cmd('setacl /zklock/queues/q4/entries zkl:secret'), 'ok', 'the ACL is given back');
ok(wait_until(sub { ($kz->cmd('ls /zklock/queues/q4/entries') // '') eq 'ls -' }, 40),
	'the item is consumed then');

$s1->quit;
$kz->quit;
$other->quit;
done_testing();
