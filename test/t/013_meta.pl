
# 013_meta.pl - the release's metadata: META.json, and released SQL frozen.
#
# 1. test/pgxn_meta.py finds META.json valid against the PGXN Meta Spec
#    1.0.0 (test/pgxn-meta-schema.json, python3-jsonschema) and consistent
#    with the tree (provides' files exist, versions are zklock.control's
#    default_version, CHANGELOG.md and debian/changelog name the version).
# 2. It can fail: copies of META.json with one fault each (a version that
#    is not a semantic version, an unknown key, a license string the spec
#    does not list, a missing required key, a docfile that does not exist,
#    a range that admits no version, the extension's version not
#    default_version's, a custom key without x_ is refused and one with it
#    accepted) are each refused, naming the fault.
# 3. tools/frozen.sh: in a git repository whose tag v1.0 has zklock--1.0.sql,
#    an unchanged copy passes, a changed or missing one fails, and a tree
#    without .git (tools/test.sh's copy) is skipped with a message.  Needs
#    git (skipped without it).

use strict;
use warnings FATAL => 'all';

use File::Copy;
use File::Temp qw(tempdir);
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $SRC = $ZkLockTest::SRC;
my $PY = $ZkLockTest::PYTHON;

sub run_cmd
{
	my @cmd = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return ($? >> 8, $out . $err);
}

# ---- 1. the tree's META.json ----
my ($rc, $out) = run_cmd($PY, "$SRC/test/pgxn_meta.py", '--root', $SRC);
is($rc, 0, 'META.json is valid and consistent with the tree') or diag $out;
like($out, qr/^META\.json is valid \(PGXN Meta Spec 1\.0\.0, zklock \d+\.\d+\.\d+\)$/m, $out =~ s/\n.*//sr);

# ---- 2. faults are found ----
my $json = JSON::PP->new->canonical->pretty;
my $meta = do { local $/; open(my $fh, '<', "$SRC/META.json") or die $!; decode_json(<$fh>) };
my $tmp = tempdir(CLEANUP => 1);
my %FAULTS = (
	'version 1.1 (not semver)' => [ sub { $_[0]{version} = '1.1' }, qr/^version: '1\.1' does not match/m ],
	'unknown key author' => [ sub { $_[0]{author} = 'me' }, qr/^\(top\): 'author' does not match any of the regexes: '\^\[xX\]_'/m ],
	'license gpl' => [ sub { $_[0]{license} = 'gpl' }, qr/^license: 'gpl' is not valid/m ],
	'no maintainer' => [ sub { delete $_[0]{maintainer} }, qr/'maintainer' is a required property/ ],
	'provides without version' => [ sub { delete $_[0]{provides}{zklock}{version} },
		qr/provides\/zklock: 'version' is a required property/ ],
	'a docfile that is not there' => [ sub { $_[0]{provides}{zklock}{docfile} = 'doc/nothing.md' },
		qr/docfile: "doc\/nothing\.md" does not exist/ ],
	'an absolute file' => [ sub { $_[0]{provides}{zklock}{file} = '/etc/passwd' },
		qr/provides\/zklock\/file/ ],
	'an empty range' => [ sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '>= 19.0.0, < 15.0.0' },
		qr/range ">= 19\.0\.0, < 15\.0\.0" admits no version/ ],
	'a range of non-semver' => [ sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '>= 15' },
		qr/">= 15" of range ">= 15" is not a comparison with a semantic version/ ],
	'the extension not at default_version' => [
		sub { $_[0]{provides}{zklock}{version} = '0.9.0'; $_[0]{version} = '0.9.0' },
		qr/provides\/zklock\/version is 0\.9\.0, but zklock\.control's default_version/ ],
	'meta-spec 2.0.0' => [ sub { $_[0]{'meta-spec'}{version} = '2.0.0' }, qr/^meta-spec\/version:/m ],
	'a tag with a slash' => [ sub { $_[0]{tags} = ['a/b'] }, qr/^tags/m ],
	'a custom key without x_' => [ sub { $_[0]{provides}{zklock}{notes} = 'n' },
		qr/^provides\/zklock: 'notes' does not match any of the regexes/m ],
);
for my $what (sort keys %FAULTS)
{
	my ($change, $expect) = @{ $FAULTS{$what} };
	my $m = decode_json(encode_json($meta));
	$change->($m);
	my $f = "$tmp/META.json";
	open(my $fh, '>', $f) or die $!;
	print $fh $json->encode($m);
	close $fh;
	($rc, $out) = run_cmd($PY, "$SRC/test/pgxn_meta.py", '--root', $SRC, '--meta', $f);
	is($rc, 1, "refused: $what");
	like($out, $expect, "... naming it") or diag $out;
}
{
	my $m = decode_json(encode_json($meta));
	$m->{x_zklock} = { note => 'custom keys start with x_' };
	$m->{provides}{zklock}{X_built_by} = 'tools/package.sh';
	open(my $fh, '>', "$tmp/META.json") or die $!;
	print $fh $json->encode($m);
	close $fh;
	($rc, $out) = run_cmd($PY, "$SRC/test/pgxn_meta.py", '--root', $SRC, '--meta', "$tmp/META.json");
	is($rc, 0, 'custom keys x_ and X_ are accepted') or diag $out;
}

# ---- 3. tools/frozen.sh ----
SKIP:
{
	# IPC::Run dies when the command does not exist (no git, as in a minimal root)
	my ($grc) = eval { run_cmd('git', '--version') };
	skip 'no git', 6 if !defined($grc) || $grc != 0;
	my $repo = "$tmp/repo";
	mkdir $repo or die $!;
	copy("$SRC/zklock--1.0.sql", "$repo/zklock--1.0.sql") or die $!;
	for my $c ([ 'init', '-q' ], [ 'add', 'zklock--1.0.sql' ],
		[ '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', '1.0' ],
		[ 'tag', 'v1.0' ])
	{
		my ($r, $o) = run_cmd('git', '-C', $repo, @$c);
		die "git @$c: $o" if $r;
	}
	($rc, $out) = run_cmd('bash', "$SRC/tools/frozen.sh", $repo);
	is($rc, 0, 'frozen.sh: the released script unchanged passes') or diag $out;
	like($out, qr/1 released SQL script\(s\) unchanged \(v1\.0\)/, '... saying so');
	open(my $fh, '>>', "$repo/zklock--1.0.sql") or die $!;
	print $fh "-- a later edit\n";
	close $fh;
	($rc, $out) = run_cmd('bash', "$SRC/tools/frozen.sh", $repo);
	is($rc, 1, 'frozen.sh: a changed released script fails');
	like($out, qr/zklock--1\.0\.sql differs from its release v1\.0.*\+-- a later edit/s, '... with the diff');
	unlink "$repo/zklock--1.0.sql";
	($rc, $out) = run_cmd('bash', "$SRC/tools/frozen.sh", $repo);
	like($out, qr/zklock--1\.0\.sql \(released in v1\.0\) is missing/, 'frozen.sh: a removed released script fails');
	mkdir "$tmp/nogit" or die $!;
	($rc, $out) = run_cmd('bash', "$SRC/tools/frozen.sh", "$tmp/nogit");
	like($out, qr/^frozen\.sh: skipped: .* is not a git checkout/m, 'frozen.sh: no repository, skipped');
}

done_testing();
