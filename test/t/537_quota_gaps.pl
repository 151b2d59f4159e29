
# 537_quota_gaps.pl - the gaps a hostile review found in the quotas and
# bounds of issue 35, each checked against what ZooKeeper really holds.
#
# A small cluster (max_connections 6, few worker processes), so that the
# table of write rates (one slot per backend slot) is small.
#
#   A. Slots that owe are never reused (item 3): 40 roles write one 8 kB
#      item each at zklock.max_write_rate 1 kB/s; once every slot holds a
#      role that still owes, the next role is refused (53400, hint), and
#      nothing of its write reaches ZooKeeper; the first role's backlog is
#      still in zk_quotas (its debt was not forgotten to make room).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('qgaps', $zk,
	connect_timeout => '5s',
	conf => "max_connections = 6\nautovacuum_max_workers = 1\n"
	  . "max_worker_processes = 3\nmax_wal_senders = 0\n"
	  . "max_prepared_transactions = 0\n");

sub q1
{
	my ($sql) = @_;
	my $r = one_shot($node, $sql, 60);
	return $r->{sqlstate} eq '00000' ? $r->{out} : "error $r->{sqlstate}: $r->{err}";
}

sub qpath { return q1("SELECT zk_path('queue', '$_[0]')"); }
sub items { return zk_count($zk, qpath($_[0]) . '/entries'); }

#
# A. slots that owe are never reused
#
my $nroles = 40;
$node->safe_psql('postgres', join("\n",
	map { "CREATE ROLE q$_; SELECT zk_grant('produce', 'q$_');" } 1 .. $nroles));
$node->safe_psql('postgres',
	"ALTER SYSTEM SET zklock.max_write_rate = '1kB'; SELECT pg_reload_conf()");
sleep 0.5;
my $s = new_session($node, name => 'slots');
is($s->query_safe('SHOW zklock.max_write_rate'), '1kB', 'A: every role writes at 1 kB/s');
my ($ok, $refused) = (0, undef);
for my $i (1 .. $nroles)
{
	# the session user is what is charged: SET SESSION AUTHORIZATION
	my $r = $s->query("SET SESSION AUTHORIZATION q$i; "
		  . "SELECT zk_enqueue('slots', repeat('x', 8000)); RESET SESSION AUTHORIZATION");
	if ($r->{err} =~ /ERROR:\s+([0-9A-Z]{5}):/)
	{
		$refused = { %$r, sqlstate => $1 };
		note "A: role q$i refused after $ok roles wrote";
		last;
	}
	$ok++;
}
ok(defined $refused, "A: once every slot owes, another role is refused (after $ok roles)");
ok($ok >= 5 && $ok < $nroles, "A: each of the first roles got a slot ($ok)");
is($refused && $refused->{sqlstate}, '53400', 'A: 53400');
like($refused && $refused->{err}, qr/too many roles write into zookeeper at once/, 'A: message says why')
  or diag $refused && $refused->{err};
like($refused && $refused->{err}, qr/HINT:.*Retry.*zklock\.max_write_rate/s, 'A: hint says what to do');
is(items('slots'), $ok, "A: ZooKeeper holds the $ok items of the roles with a slot, nothing of the refused one");
my $backlog = q1("SELECT write_backlog FROM zk_quotas WHERE role = 'q1'");
ok($backlog =~ /^\d+$/ && $backlog > 0,
	"A: the first role still owes in zk_quotas ($backlog bytes): its slot was not given away");
$s->quit;
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET zklock.max_write_rate; SELECT pg_reload_conf()");

$node->stop;
zk_stop($zk);
done_testing();
