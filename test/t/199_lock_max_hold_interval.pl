
# 199_lock_max_hold_interval.pl - arg_max_hold (lock_sql.c)
# converts the interval with unchecked int64 arithmetic and bounds only its
# months: "max_hold must be between 1 millisecond and 100 years".
#
# 1. '1000000 days' (about 2738 years) is accepted: the bound says 100 years.
# 2. '106751992 days 2562047768:01:51.551616': days * USECS_PER_DAY + time
#    overflows int64 and wraps to 2 000 000 us: a max_hold of about 3000
#    centuries becomes 2 seconds, and the lock is taken back after 2 s.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $n1 = zk_node('mhi1', $zk);

my $a = new_session($n1, name => 'a');
for my $iv ('1000000 days', '106751992 days 2562047768:01:51.551616')
{
	my $r = $a->query("SELECT zk_session_lock('i1', max_hold => interval '$iv')");
	is($r->{sqlstate}, '22023', "max_hold '$iv' (over 100 years) is refused");
	next if $r->{sqlstate} ne '00000';
	if ($iv =~ /106751992/)
	{
		my $taken = wait_log($n1, qr/took back zookeeper lock "i1".*maximum of (\d+) ms/, 8);
		ok(!$taken, "max_hold '$iv': the lock is not taken back within seconds")
		  or diag('the overflowed max_hold was taken as about 2000 ms');
	}
	$a->query("SELECT zk_unlock_all()");
}
done_testing();
