
# 455_partition.pl - a ZooKeeper server cut off from its quorum but still
# reachable by its clients cannot make two leaders or two holders of a
# one-lease semaphore (issue 22, item 4).
#
# A three-server ensemble whose server 3 reaches the others' quorum and
# election ports (and they its) only through test/blackhole.py.  Cluster A
# talks to server 3 alone, cluster B to servers 1 and 2.  A leads the
# election 'cron' and holds the one lease of semaphore 'one' in an open
# transaction; B waits for the lease.  Then the proxies black-hole: server 3
# keeps answering A's reads and pings (syncLimit is 20 s here, longer than
# A's 4 s session), while the quorum expires A's session after 4 s and B
# leads and takes the lease.  Until issue 22 A's proof of life was an
# exists that server 3 answered alone, so A went on calling itself leader
# and its COMMIT of the lease succeeded: two leaders, two holders.  Now the
# proof of life is a sync, which server 3 must forward to the leader and
# cannot: A's zk_is_leader turns false 2/3 of a session timeout after its
# last answered sync, before the quorum expires the session, and its COMMIT
# fails.  Sampled every 100 ms: never both leaders.

use strict;
use warnings FATAL => 'all';

use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $ens = "$PostgreSQL::Test::Utils::tmp_check/ens_partition";
my $zk_sh = $ZkLockTest::ZK_SH;
my $bh_py = "$ZkLockTest::SRC/test/blackhole.py";

# client ports P; zk.sh puts quorum on P+1000 and election on P+2000
my @cp;
while (@cp < 3)
{
	my $p = PostgreSQL::Test::Cluster::get_free_port();
	next if $p > 63000;
	push @cp, $p;
}
my %px = map { $_ => PostgreSQL::Test::Cluster::get_free_port() } qw(1q 1e 2q 2e 3q 3e);
my $ctl = PostgreSQL::Test::Cluster::get_free_port();

sub zksh
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'bash', $zk_sh, @args ], '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

# the configurations: made by zk.sh, then pointed through the proxies
my ($rc, $out, $err) = zksh('start-ensemble', $ens, @cp);
die "no ensemble: $out $err" if $rc;
zksh('stop', $ens);
for my $i (1 .. 3)
{
	my $f = "$ens/s$i/zoo.cfg";
	my $cfg = slurp_file($f);
	$cfg =~ s/^syncLimit=.*$/syncLimit=40/m;
	for my $j (1 .. 3)
	{
		next if $j == $i;
		next unless $i == 3 || $j == 3;
		my ($q, $e) = ($cp[ $j - 1 ] + 1000, $cp[ $j - 1 ] + 2000);
		$cfg =~ s/^server\.$j=127\.0\.0\.1:$q:$e$/server.$j=127.0.0.1:$px{"${j}q"}:$px{"${j}e"}/m
		  or die "no server.$j line in $f";
	}
	open(my $fh, '>', $f) or die;
	print $fh $cfg;
	close($fh);
}
my @pairs = map {
	my $j = $_;
	("$px{\"${j}q\"}:" . ($cp[ $j - 1 ] + 1000), "$px{\"${j}e\"}:" . ($cp[ $j - 1 ] + 2000))
} 1 .. 3;
my $bh_log = "$PostgreSQL::Test::Utils::log_path/455_partition_blackhole.log";
my $bh = IPC::Run::start([ $ZkLockTest::PYTHON, $bh_py, $ctl, @pairs ],
	'>', $bh_log, '2>&1');
sub bh
{
	my ($cmd) = @_;
	for (1 .. 50)
	{
		my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$ctl", Timeout => 5);
		if ($s)
		{
			print $s "$cmd\n";
			my $l = <$s> // '';
			close $s;
			return $l;
		}
		sleep 0.1;
	}
	die "blackhole.py does not answer on $ctl";
}
like(bh('stats'), qr/"all": false/, 'the proxies run');
($rc, $out, $err) = zksh('start-ensemble', $ens, @cp);
ok($rc == 0, 'the ensemble runs through the proxies') or diag "$out $err";
# server 3 must be a follower (an isolated leader answers syncs itself
# until it steps down, and the others cannot write meanwhile): restart it
# until another server leads
sub mode3
{
	my ($r, $o) = zksh('cmd', $cp[2], 'srvr');
	return $o =~ /^Mode: (\w+)/m ? $1 : 'none';
}
for (1 .. 5)
{
	last if mode3() eq 'follower';
	zksh('stop', "$ens/s3");
	zksh('start', "$ens/s3");
	wait_until(sub { mode3() ne 'none' }, 30);
}
is(mode3(), 'follower', 'server 3 follows');

my $A = zk_node('partA', "127.0.0.1:$cp[2]",
	session_timeout => '4s', connect_timeout => '3s',
	conf => "zklock.elections = 'cron'\nzklock.commit_timeout = '3s'\n");
ok(wait_until(sub { $A->safe_psql('postgres', "SELECT zk_is_leader('cron')") eq 't' }, 30),
	'A leads');
my $B = zk_node('partB', "127.0.0.1:$cp[0],127.0.0.1:$cp[1]",
	session_timeout => '4s', connect_timeout => '3s',
	conf => "zklock.elections = 'cron'\n");
ok(wait_until(sub { $B->safe_psql('postgres', "SELECT count(*) FROM zk_election_candidates('cron')") eq '2' }, 30),
	'B stands behind A');

my $ha = new_session($A, name => 'holderA');
$ha->query_safe("BEGIN; SELECT zk_semaphore('one', 1)");
my $hb = new_session($B, name => 'waiterB');
$hb->query_safe('BEGIN');
$hb->send("SELECT zk_semaphore('one', 1, '60s')");
my $sa = new_session($A, name => 'sampleA');
my $sb = new_session($B, name => 'sampleB');

like(bh('hole'), qr/^ok/, 'server 3 is cut off from its quorum');
my $t0 = time();
my ($both, $samples, $b_leads_at, $b_holds_at, $a_false_at) = (0, 0, undef, undef, undef);
my $a_commit;
while (time() - $t0 < 18)
{
	my $a = $sa->query_safe("SELECT zk_is_leader('cron')");
	my $b = $sb->query_safe("SELECT zk_is_leader('cron')");
	$samples++;
	$both++ if $a eq 't' && $b eq 't';
	$a_false_at //= time() - $t0 if $a ne 't';
	$b_leads_at //= time() - $t0 if $b eq 't';
	if (!defined $b_holds_at)
	{
		my $r = $hb->poll;
		if ($r)
		{
			die "B's wait for the lease failed: $r->{sqlstate} $r->{err}"
			  unless $r->{sqlstate} eq '00000';
			$b_holds_at = time() - $t0;
			# B holds the lease: A's COMMIT must not succeed now
			$a_commit = $ha->query('COMMIT');
		}
	}
	last if defined $b_leads_at && defined $b_holds_at && time() - $t0 > $b_leads_at + 3;
	sleep 0.1;
}
note sprintf('%d samples; A stopped leading at %s s, B leads at %s s, B holds at %s s',
	$samples, $a_false_at // 'never', $b_leads_at // 'never', $b_holds_at // 'never');
is($both, 0, 'never two leaders');
ok(defined $b_leads_at, 'B leads once the quorum expired A');
ok(defined $a_false_at && defined $b_leads_at && $a_false_at <= $b_leads_at,
	'A stopped leading before B began');
ok(defined $b_holds_at, 'B took the lease');
ok($a_commit && $a_commit->{sqlstate} ne '00000',
	'A could not commit its lease once B held it: ' . ($a_commit ? $a_commit->{sqlstate} : 'no answer'));
$hb->query_safe('COMMIT');

like(bh('heal'), qr/^ok/, 'server 3 is back');
ok(wait_until(sub {
	my $s = zk_status($A);
	$s && $s->{state} eq 'connected' }, 60), 'A is connected again');
is($A->safe_psql('postgres', "SELECT zk_is_leader('cron')"), 'f', 'A is not the leader');
is($B->safe_psql('postgres', "SELECT zk_is_leader('cron')"), 't', 'B is');

$_->quit for ($ha, $hb, $sa, $sb);
$A->stop('fast');
$B->stop('fast');
zksh('stop', $ens);
bh('quit');
$bh->finish;
done_testing();

END
{
	zksh('kill', $ens) if defined $ens && -d $ens;
}
