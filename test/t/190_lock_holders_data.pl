
# 190_lock_holders_data.pl - zk_lock_holders(name) with many contenders and with
# node data written by foreign ZooKeeper clients (issue 6, defects 9 and 11).
#
# A foreign client (kazoo, driven from Python) creates contender nodes the
# way kazoo's Lock names them, <guid>__lock__<seq>, ephemeral and
# sequential, carrying data of its choosing:
#
# - 64 contenders of one lock with about 1 KB of data each (sized so that
#   the whole answer lands exactly at the end of the first buffer), 64 with
#   exactly 1 KB, 200 with about 1 KB, and 200 whose sizes again land at the
#   end of the first buffer: zk_lock_holders must return every contender,
#   exactly once, with its full data.
# - data like {"pid":"abc"}, a pid out of range, invalid JSON, binary bytes,
#   huge numbers, nested objects: zk_lock_holders never raises; fields that
#   are missing or not valid for their column are NULL; the raw data is
#   shown.
#
# Every count is checked against ZooKeeper itself.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('holders_data', $zk,
	session_timeout => '10s',
	connect_timeout => '5s');

my $LOCKS = '/zklock/locks';

# The foreign client (test/holders_kazoo.py): one kazoo session whose
# ephemeral nodes live until it quits
my $fc = kazoo_driver($zk, 'holders_kazoo.py');

# create one contender under $parent per element of @data (bytes); returns
# the node names, in creation order
sub fc_create
{
	my ($parent, @data) = @_;
	my @hex = map { length($_) ? unpack('H*', $_) : '-' } @data;
	my $l = $fc->cmd("create $parent @hex", 120);
	die "foreign client: " . ($l // 'no answer') . " $fc->{stderr}"
	  unless defined $l && $l =~ /^created /;
	my @names = split / /, substr($l, 8);
	return @names;
}

my $q = new_session($node, name => 'observer');

# zk_lock_holders($name) as a list of hashes; ($rows, $result)
sub holders
{
	my ($name) = @_;
	my $r = $q->query("SELECT row_to_json(h) FROM zk_lock_holders('$name') h", 60);
	my @rows;
	if ($r->{done} && $r->{sqlstate} eq '00000')
	{
		@rows = map { decode_json($_) } grep { $_ ne '' } split /\n/, $r->{out};
	}
	return (\@rows, $r);
}

#
# defect 9: every contender, however much data they carry
#
# A row costs the worker a record of MAXALIGN(24 + 50 + datalen) bytes (node
# names are 50 bytes: 32 hex digits of guid, "__lock__", 10 digits); with
# 950 bytes of data that is exactly 1024, so 64 of them are exactly the
# 64 kB of the first buffer, without room left for its header.
sub pad
{
	my ($len, $tag) = @_;
	my $s = "foreign-contender $tag ";
	return substr($s . ('x' x $len), 0, $len);
}

my @sets = (
	[ 'many64', [ map { pad(950, $_) } 1 .. 64 ], '64 contenders with 950 bytes of data each' ],
	[ 'many64k', [ map { pad(1024, $_) } 1 .. 64 ], '64 contenders with 1 kB of data each' ],
	[ 'many200', [ map { pad(1000, $_) } 1 .. 200 ], '200 contenders with 1000 bytes of data each' ],
	# 192 records of 328 bytes and 8 of 320: 65536 bytes again
	[ 'many200b', [ (map { pad(254, $_) } 1 .. 192), (map { pad(246, $_) } 193 .. 200) ],
		'200 contenders whose records fill the first buffer exactly' ],
);

foreach my $set (@sets)
{
	my ($name, $data, $what) = @$set;
	my $path = "$LOCKS/$name";
	my @names;
	# in chunks: one command line stays reasonably short
	for (my $i = 0; $i < @$data; $i += 50)
	{
		my $j = $i + 49 < $#$data ? $i + 49 : $#$data;
		push @names, fc_create($path, @{$data}[ $i .. $j ]);
	}
	my %want;
	@want{@names} = @$data;
	my @inzk = zk_children($zk, $path);
	is(scalar(@inzk), scalar(@$data), "$what: ZooKeeper has " . scalar(@$data) . " children under $path");

	my ($rows, $r) = holders($name);
	is($r->{sqlstate}, '00000', "$what: zk_lock_holders('$name') succeeds") or diag $r->{err};
	is(scalar(@$rows), scalar(@$data), "$what: zk_lock_holders returns exactly " . scalar(@$data) . ' rows');
	my %seen;
	$seen{ $_->{node} // '' }++ foreach @$rows;
	my @missing = grep { !$seen{$_} } @inzk;
	my @dups = grep { $seen{$_} > 1 } keys %seen;
	is_deeply([ sort @missing ], [], "$what: no contender is missing") or diag "missing: @missing";
	is_deeply([ sort @dups ], [], "$what: no contender appears twice");
	is_deeply([ map { $_->{position} } @$rows ], [ 0 .. $#$rows ], "$what: positions 0.." . $#$rows . ' in order');
	is(scalar(grep { ($_->{state} // '') eq 'held' } @$rows), 1, "$what: exactly one holder");
	is($rows->[0]{state} // '', 'held', "$what: the first contender holds");
	my @bad = grep { !defined $_->{data} || !defined $want{ $_->{node} // '' } || $_->{data} ne $want{ $_->{node} } } @$rows;
	is(scalar(@bad), 0, "$what: every row shows its node's data in full")
	  or diag "first bad row: " . encode_json($bad[0]);
	my @seqs = map { ($_->{node} // '') =~ /(\d{10})$/ ? $1 + 0 : -1 } @$rows;
	is_deeply(\@seqs, [ sort { $a <=> $b } @seqs ], "$what: rows in queue (sequence) order");
}

# an SQL session queued behind the foreign contenders is listed too
my $w = new_session($node, name => 'sql_waiter');
queue_request($zk, $w, "SELECT zk_lock('many64', '60s')", "$LOCKS/many64", 65, 'an SQL session queued as the 65th contender');
my ($rows, $r) = holders('many64');
is(scalar(@$rows), 65, 'zk_lock_holders shows 65 rows with the SQL waiter') or diag $r->{err};
is($rows->[-1]{pid} // '', $w->pid, 'the last row is the SQL waiter, with its pid');
$q->query_safe("SELECT pg_cancel_backend($w->{pid})");
$r = $w->wait(10);
is($r->{sqlstate}, '57014', 'SQL waiter cancelled');
$w->query_safe('ROLLBACK');
ok(scalar(zk_wait_count($zk, "$LOCKS/many64", 64, 10)), "the SQL waiter's node is gone");

#
# defect 11: foreign node data never makes zk_lock_holders raise
#
# [ data, { column => expected value (undef: NULL) }, what ]
my $huge = '1' . ('9' x 400);
my @foreign = (
	[ '{"cluster":"c","pid":12}', { pid => 12 }, 'a minimal valid identity (control)' ],
	[ '{"pid":"abc"}', { pid => undef, cluster => undef }, 'pid "abc", no cluster' ],
	[ '{"cluster":"x","pid":"abc","port":"zz"}', { pid => undef, port => undef }, 'pid "abc", port "zz"' ],
	[ '{"cluster":1,"pid":99999999999999}', { pid => undef }, 'pid beyond the integer range' ],
	[ qq({"cluster":"x","pid":$huge,"port":$huge}), { pid => undef, port => undef }, 'a 401-digit pid and port' ],
	[ '{"cluster":"x","pid":1e400,"port":-1e400}', { pid => undef, port => undef }, 'pid 1e400' ],
	[ '{"cluster":"x","pid":1.5,"port":2.25}', { pid => undef, port => undef }, 'fractional pid and port' ],
	[ '{"cluster":"x","pid":true,"port":false}', { pid => undef, port => undef }, 'boolean pid and port' ],
	[ '{"cluster":"x","pid":[7],"port":{"n":5}}', { pid => undef, port => undef }, 'array pid, object port' ],
	[ '{"cluster":{"a":{"b":"c"}},"pid":{"n":[1,2,{"x":3}]},"host":["h",["i"]]}',
		{ pid => undef, cluster => undef, host => undef }, 'nested objects and arrays' ],
	[ '{"cluster":"x","pid":1,"pid":"abc"}', {}, 'duplicate key with an invalid second value' ],
	[ '{"cluster":"x","pid":12', { pid => undef, cluster => undef }, 'invalid JSON (truncated)' ],
	[ '{"cluster":"x",,"pid":12}', { pid => undef, cluster => undef }, 'invalid JSON (syntax)' ],
	[ '{"cluster":"x","pid":1,"host":"a\u0000b"}', {}, 'JSON with \\u0000' ],
	[ '{"cluster":"x","pid":1,"host":"\ud800"}', {}, 'JSON with a lone surrogate' ],
	[ "\x00\xff\xfe{\x01\x02", { pid => undef, cluster => undef }, 'binary bytes' ],
	[ "{\"cluster\":\"x\",\"pid\":1,\"host\":\"\xff\xfe\"}", {}, 'JSON with invalid UTF-8 inside' ],
	[ '[1,2,3]', { pid => undef, cluster => undef }, 'a JSON array' ],
	[ '"just a string"', { pid => undef, cluster => undef }, 'a JSON string' ],
	[ '{' x 600, { pid => undef, cluster => undef }, '600 nested braces' ],
	[ '[' x 5000, { pid => undef, cluster => undef }, '5000 nested brackets' ],
	[ '{"cluster":"x","pid":1,"pad":"' . ('p' x 5000) . '"}', {}, 'valid JSON of 5 kB' ],
	[ 'kazoo-tap', { pid => undef, cluster => undef }, "kazoo's plain identifier" ],
	[ '', { pid => undef, cluster => undef }, 'no data at all' ],
);

my $i = 0;
my @all_names;
foreach my $f (@foreign)
{
	my ($data, $expect, $what) = @$f;
	$i++;
	my $name = "fd$i";
	my ($nodename) = fc_create("$LOCKS/$name", $data);
	push @all_names, $nodename;
	my ($rows, $r) = holders($name);
	is($r->{sqlstate}, '00000', "foreign data ($what): zk_lock_holders does not raise")
	  or diag $r->{err};
	is(scalar(@$rows), 1, "foreign data ($what): one row");
	my $row = $rows->[0] // {};
	is($row->{node} // '', $nodename, "foreign data ($what): the row names the node");
	foreach my $col (sort keys %$expect)
	{
		is($row->{$col}, $expect->{$col},
			"foreign data ($what): $col is " . ($expect->{$col} // 'NULL'));
	}
	if (length($data) && !exists $expect->{data})
	{
		ok(defined $row->{data} && length($row->{data}) > 0, "foreign data ($what): the raw data is shown");
		# text that is valid UTF-8 (without NUL) is shown as it is
		my $copy = $data;
		if ($copy !~ /\x00/ && utf8::decode($copy) && length($data) <= 1024)
		{
			is($row->{data} // '', $copy, "foreign data ($what): data is the raw text");
		}
	}
}

# all of them as contenders of one lock, plus an SQL holder in front
my $h = new_session($node, name => 'sql_holder');
$h->query_safe('BEGIN');
$h->query_safe("SELECT zk_lock('fdall')");
my @names = fc_create("$LOCKS/fdall", map { $_->[0] } @foreign);
is(scalar(zk_children($zk, "$LOCKS/fdall")), 1 + @foreign, 'fdall: SQL holder and every foreign contender in ZooKeeper');
($rows, $r) = holders('fdall');
is($r->{sqlstate}, '00000', 'fdall: zk_lock_holders with every kind of foreign data at once does not raise')
  or diag $r->{err};
is(scalar(@$rows), 1 + @foreign, 'fdall: one row per contender');
is($rows->[0]{pid} // '', $h->pid, 'fdall: the first row is the SQL holder, its identity read');
is($rows->[0]{state} // '', 'held', 'fdall: the SQL holder holds');
$h->query_safe('COMMIT');

# same through the bigint-key form, on a numeric lock name
fc_create("$LOCKS/4242", '{"cluster":"x","pid":"abc","port":"zz"}');
$r = $q->query('SELECT count(*), count(pid), count(data) FROM zk_lock_holders(4242::bigint)', 60);
is($r->{sqlstate}, '00000', 'zk_lock_holders(bigint) with foreign data does not raise') or diag $r->{err};
is($r->{out}, '1|0|1', 'zk_lock_holders(bigint): one row, pid NULL, data shown');

# nothing leaked
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0')
  or diag 'entries_used ' . zk_status_value($node, 'entries_used');

$fc->quit;
ok(scalar(zk_wait_count($zk, "$LOCKS/many64", 0, 15)), "the foreign client's nodes went with its session");

$q->quit;
$w->quit;
$h->quit;
$node->stop;
done_testing();
