
# 525_signed_nodes.pl - a transaction node or a claim is acted on only if it
# is verifiably this cluster's (issue 23, "hostile data").
#
# The settling pass publishes a transaction node, or consumes a claim, when
# the WAL proves that the transaction it names committed.  Every value that
# takes (run, xid, tli, lsn, rec) is in any claim's JSON, so a ZooKeeper
# client that may write under the root could, while the cluster is down:
#   (a) write a transaction node for a real committed transaction of this
#       cluster, carrying an item nobody enqueued and the opening of a gate;
#   (b) copy a genuine claim's data onto another tenant's item's taken node;
#   (c) copy another genuine claim onto a further item of the same queue.
# Until the key, the restarted worker published the item, opened the gate
# and consumed both items.  Now every transaction node and claim carries an
# HMAC of its path and content under $PGDATA/zklock.key: the forgeries are
# left alone and logged, and counted in the settling summary, while a
# genuine transaction whose publication was cut off by a crash is still
# published exactly once.
#
# Also: the key is made 0600 whatever the umask, in a data directory of 0750
# (initdb -g); a group-readable key there stops the start with a clear
# message; in a data directory of 0700 a copy's 0644 key is made 0600.

use strict;
use warnings FATAL => 'all';

use File::Copy;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
my $ROOT = '/zklock';
my $Q = "$ROOT/queues";
my $TXNS = "$ROOT/txns";
my $GATES = "$ROOT/gates";

# a data directory with group access (0750), started under umask 000
my $A = PostgreSQL::Test::Cluster->new('signA');
$A->init(extra => ['-g']);
$A->append_conf('postgresql.conf',
	zk_conf($p->{hosts}, session_timeout => '6s', connect_timeout => '3s',
		conf => "zklock.commit_timeout = '2s'\n"));
{
	my $old = umask(0);
	$A->start;
	umask($old);
}
$A->safe_psql('postgres', 'CREATE EXTENSION zklock');
ZkLockTest::wait_connected($A, 'A did not connect');
my $pgdata = $A->data_dir;
my $KEY = "$pgdata/zklock.key";

sub sql { return $A->safe_psql('postgres', $_[0]); }
sub mode_of { return -e $_[0] ? sprintf('%04o', (stat($_[0]))[2] & 07777) : 'missing'; }

sub log_from
{
	my ($from) = @_;
	return substr(slurp_file($A->logfile), $from);
}

# ---- the key file ----
is(mode_of($pgdata), '0750', 'the data directory has group access (0750)');
ok(-f $KEY, 'the first start made zklock.key');
is(mode_of($KEY), '0600', 'zklock.key is 0600 though the umask was 000');
is(-s $KEY // 0, 32, 'zklock.key holds 32 bytes');
like(slurp_file($A->logfile), qr/LOG:\s+zklock: made a new key in ".*zklock\.key"/,
	'the log says a key was made');

# ---- real committed transactions, and their claims' data ----
sql("SELECT zk_enqueue('rq', 'r' || i) FROM generate_series(1, 3) i");
sql("SELECT zk_enqueue('other', 'victim')");
sql("SELECT zk_gate_close('gsh')");
ok(zk_exists($zk, "$GATES/gsh"), 'the gate gsh is closed');
my ($victim) = zk_children($zk, "$Q/other/entries");
ok(defined $victim, "another tenant's item is $victim");

# a transaction dequeues one item of rq; returns its claim's data as read
# from ZooKeeper while it was held, then commits
my $s = new_session($A, name => 's');
sub dequeue_committed
{
	my ($want) = @_;
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT body FROM zk_dequeue('rq', '5s')"), $want, "dequeued $want");
	my ($node) = zk_children($zk, "$Q/rq/taken");
	my $data = zk_get($zk, "$Q/rq/taken/$node");
	$s->query_safe('COMMIT');
	ok(wait_until(sub { !zk_exists($zk, "$Q/rq/taken/$node") }, 10), "$want consumed at COMMIT");
	return (decode_json($data), $data);
}
my ($c1, $c1_raw) = dequeue_committed('r1');
my ($c2, $c2_raw) = dequeue_committed('r2');
like($c1->{mac} // '', qr/^[0-9a-f]{64}$/, 'a claim carries a MAC');
my ($r3) = zk_children($zk, "$Q/rq/entries");
ok(defined $r3, "r3 is left, as $r3");
my $sysid = sql('SELECT system_identifier FROM pg_control_system()');
is($c1->{cluster}, $sysid, 'the claim names this cluster');

# ---- a genuine crash between COMMIT and publication ----
my $drop = proxy_rule($p, 'drop-requests multi');
my $r = $s->query("SELECT zk_enqueue('gq', 'genuine')", 10);
# (autocommit: the COMMIT returns with a WARNING, the multi was dropped)
like($r->{err} // '', qr/not yet visible/, 'the publishing multi of a committed enqueue is lost')
  or diag explain $r;
is(zk_count($zk, $TXNS), 1, 'its transaction node is in ZooKeeper');
my ($genuine_txn) = zk_children($zk, $TXNS);
$s->quit;
$A->stop('immediate');
proxy_cmd($p, "clear $drop");
is(zk_count($zk, "$Q/gq/entries"), 0, 'its item is not published yet');

# ---- the forgeries, written while A is down ----
my $forger = <<'PY';
import json, os, struct, sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1])
zk.start(timeout=15)
for op in json.loads(sys.argv[2]):
    if op["kind"] == "txn":
        items = b""
        for it in op["items"]:
            name, payload = it["name"].encode(), it.get("payload", "").encode()
            items += struct.pack("<HHI", it["prio"], len(name), len(payload)) + name + payload
        v3 = op.get("v3", False)
        total = (88 if v3 else 56) + len(items)
        hdr = struct.pack("<IIQQQIIQQ", 0x5A4B5133 if v3 else 0x5A4B5132,
                          len(op["items"]), int(op["sysid"]), int(op["fxid"]),
                          int(op["lsn"], 16), int(op["tli"]), total,
                          int(op["run"], 16), int(op["rec"], 16))
        if op.get("v1", False):
            # the first header: no run, no mark, no MAC
            hdr = struct.pack("<IIQQQII", 0x5A4B5154, len(op["items"]),
                              int(op["sysid"]), int(op["fxid"]), int(op["lsn"], 16),
                              int(op["tli"]), 40 + len(items))
        if v3:
            hdr += os.urandom(32)
        zk.create(op["path"], hdr + items, makepath=True)
    else:
        data = op["data"].encode()
        if zk.exists(op["path"]):
            zk.set(op["path"], data)
        else:
            zk.create(op["path"], data, makepath=True)
zk.stop()
print("forged")
PY
my $forger_py = "$PostgreSQL::Test::Utils::tmp_check/forge_525.py";
open(my $fh, '>', $forger_py) or die $!;
print $fh $forger;
close $fh;

sub txn_of
{
	my ($c, %o) = @_;
	return {
		kind => 'txn', v3 => $o{v3} ? JSON::PP::true : JSON::PP::false,
		path => "$TXNS/$c->{cluster}-$c->{run}-$c->{xid}",
		sysid => $c->{cluster}, fxid => $c->{xid}, lsn => $c->{lsn}, tli => $c->{tli},
		run => $c->{run}, rec => $c->{rec},
		items => [
			{ prio => 100, name => $o{queue}, payload => $o{payload} },
			{ prio => 0x4002, name => 'gates/gsh' },    # the gate's opening
		] };
}
# (a) the old header (no MAC), for the committed transaction of r1; and the
# new one with a made-up MAC, for that of r2
my $fa = txn_of($c1, queue => 'fq', payload => 'forged-a');
my $fa3 = txn_of($c2, queue => 'fq', payload => 'forged-a3', v3 => 1);
# (b) r1's genuine claim onto the other tenant's item; (c) r2's onto r3
my $b_data = $c1_raw;
my $c_data = $c2_raw;
my $spec = [ $fa, $fa3,
	{ kind => 'set', path => "$Q/other/taken/$victim", data => $b_data },
	{ kind => 'set', path => "$Q/rq/taken/$r3", data => $c_data } ];
my ($rc, $out, $err) = ZkLockTest::_run([ $ZkLockTest::PYTHON, $forger_py, $zk->{hosts}, encode_json($spec) ], 60);
is($rc, 0, 'a ZooKeeper client wrote the forged nodes') or diag "$out $err";
is(zk_count($zk, $TXNS), 3, 'two forged transaction nodes beside the genuine one');

# ---- the restart settles: the genuine node only ----
my $logpos = -s $A->logfile;
$A->start;
ZkLockTest::wait_connected($A, 'A did not connect again');
ok(wait_until(sub { !zk_exists($zk, "$TXNS/$genuine_txn") }, 60),
	'the genuine transaction node was settled');
ok(wait_until(sub { log_from($logpos) =~ /whose MAC does not verify/ }, 30),
	'the settling pass logged its summary');
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('gq', 10)"), 'genuine',
	'the genuine item was published exactly once');
is(zk_count($zk, "$Q/fq/entries"), 0, 'no forged item was published');
ok(zk_exists($zk, "$GATES/gsh"), 'the gate gsh is still closed');
ok(zk_exists($zk, "$Q/other/entries/$victim"), "the other tenant's item $victim was not consumed");
ok(zk_exists($zk, "$Q/rq/entries/$r3"), "r3 was not consumed");
ok(zk_exists($zk, "$TXNS/$c1->{cluster}-$c1->{run}-$c1->{xid}"), 'the forged transaction node (old header) is left alone');
ok(zk_exists($zk, "$TXNS/$c2->{cluster}-$c2->{run}-$c2->{xid}"), 'the forged transaction node (bad MAC) is left alone');

my $log = log_from($logpos);
like($log, qr/left the queue transaction node \Q$TXNS\E\/\Q$c1->{cluster}-$c1->{run}-$c1->{xid}\E alone: it has no MAC/,
	'the log names the transaction node without a MAC');
like($log, qr/left the queue transaction node \Q$TXNS\E\/\Q$c2->{cluster}-$c2->{run}-$c2->{xid}\E alone: its MAC does not verify/,
	'the log names the transaction node with a bad MAC');
like($log, qr/left the queue claim \Q$Q\E\/other\/taken\/\Q$victim\E alone: its MAC does not verify/,
	'the log names the copied claim on the other tenant\'s item');
like($log, qr/left the queue claim \Q$Q\E\/rq\/taken\/\Q$r3\E alone: its MAC does not verify/,
	'the log names the claim carrying the MAC of another node');
like($log, qr/left alone 0 queue transaction nodes holding no valid items, 0 whose transaction is not in this server's history, and 4 transaction nodes and claims whose MAC does not verify/,
	'the summary counts the four refused nodes');

# the queues work on: the operator removes the forged claim, r3 is there
zkq($zk, 'delete', "$Q/rq/taken/$r3");
is(sql("SELECT string_agg(body, ',') FROM zk_try_dequeue('rq', 10)"), 'r3', 'r3 is served once its forged claim is gone');

# ---- a group-readable key in a data directory of 0750 is refused ----
$A->stop('fast');
chmod(0640, $KEY) or die $!;
$logpos = -s $A->logfile;
ok(!$A->start(fail_ok => 1), 'A does not start with a group-readable key');
$log = log_from($logpos);
like($log, qr/FATAL:\s+zklock: refusing the key file ".*zklock\.key"/, 'the log says the key is refused');
like($log, qr/DETAIL:\s+It has group or world access \(mode 0640\)/, '... why');
like($log, qr/HINT:\s+Allow only the server's user to read it \(chmod 0600/, '... and what to do');
chmod(0600, $KEY) or die $!;
$A->start;
ZkLockTest::wait_connected($A, 'A did not connect after the chmod');
# ---- a copy made without modes, in a data directory of 0700 ----
$A->stop('fast');
my $B = PostgreSQL::Test::Cluster->new('signB');
$B->init;
$B->append_conf('postgresql.conf', zk_conf($zk));
is(mode_of($B->data_dir), '0700', 'B has a data directory of 0700');
copy($KEY, $B->data_dir . '/zklock.key') or die $!;
chmod(0644, $B->data_dir . '/zklock.key') or die $!;
$B->start;
is(mode_of($B->data_dir . '/zklock.key'), '0600', "B's copied 0644 key was made 0600");
like(slurp_file($B->logfile), qr/made the key file ".*zklock\.key" readable by the server's user only \(it was mode 0644\)/,
	'the log says so');
unlike(slurp_file($B->logfile), qr/made a new key/, 'B kept the copied key');
$B->stop('fast');

# ---- the window for nodes without a MAC closes after the first settling ----
# Nodes without a MAC are accepted only by the run that made the key: the
# nodes an older zklock left.  That window stayed open for the whole life of
# the run, so a client that may write could, at any later time, write a
# transaction node in the first header (no run, no MAC) naming any committed
# transaction of this cluster, and the next settling pass (a new session, a
# worker restart) published its items.  Now the window closes once a settling
# pass of that run completes.
my $D = PostgreSQL::Test::Cluster->new('signD');
$D->init;
$D->append_conf('postgresql.conf', zk_conf($zk, conf => "zklock.root = '/zkd'\n"));
$D->start;
$D->safe_psql('postgres', 'CREATE EXTENSION zklock');
ZkLockTest::wait_connected($D, 'D did not connect');
like(slurp_file($D->logfile), qr/made a new key/, 'D: its first start made a key');
my $DQ = '/zkd/queues';
$D->safe_psql('postgres', "SELECT zk_enqueue('dq', 'd1')");
my $ds = new_session($D, name => 'ds');
$ds->query_safe('BEGIN');
is($ds->query_safe("SELECT body FROM zk_dequeue('dq', '5s')"), 'd1', 'D: d1 dequeued');
my ($dnode) = zk_children($zk, "$DQ/dq/taken");
my $dclaim = decode_json(zk_get($zk, "$DQ/dq/taken/$dnode"));
$ds->query_safe('COMMIT');
$ds->quit;
ok(wait_until(sub { !zk_exists($zk, "$DQ/dq/taken/$dnode") }, 10), 'D: d1 consumed at COMMIT');
ok(wait_until(sub { slurp_file($D->logfile) =~ /nodes without a MAC are refused from now on/ }, 15),
	"D: the first settling pass closed the window for nodes without a MAC");
# later: an unsigned node in the first header for d1's committed transaction
my $dspec = [ {
	kind => 'txn', v1 => JSON::PP::true,
	path => "/zkd/txns/$dclaim->{cluster}-$dclaim->{xid}",
	sysid => $dclaim->{cluster}, fxid => $dclaim->{xid}, lsn => $dclaim->{lsn}, tli => $dclaim->{tli},
	run => '0', rec => '0',
	items => [ { prio => 100, name => 'uq', payload => 'unsigned-later' } ] } ];
($rc, $out, $err) = ZkLockTest::_run([ $ZkLockTest::PYTHON, $forger_py, $zk->{hosts}, encode_json($dspec) ], 60);
is($rc, 0, 'D: a client wrote an unsigned transaction node for a committed transaction') or diag "$out $err";
my $dpos = -s $D->logfile;
my $dw = worker_pid($D);
$D->safe_psql('postgres', "SELECT pg_terminate_backend($dw)");
ok(defined wait_for_worker($D, $dw), 'D: a new worker (a settling pass in the same run)');
ZkLockTest::wait_connected($D, 'D did not connect after the worker restart');
ok(wait_until(sub { substr(slurp_file($D->logfile), $dpos) =~ /left the queue transaction node \S+ alone: it has no MAC/ }, 30),
	'D: the unsigned node written after the first settling is left alone');
is(zk_count($zk, "$DQ/uq/entries"), 0, 'D: its item was not published');
$D->stop('fast');

proxy_stop($p);
zk_stop($zk);
done_testing();
