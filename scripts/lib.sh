# lib.sh — helpers shared by the scripts (scripts/sysbench.sh, scripts/test.sh).
# Source it after defining die().

# Go is expected at /usr/local/go; use it when go is not in PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi

# find_bin NAME: the path of NAME, also in the sbin directories that are not
# in every user's PATH (Debian installs mariadbd in /usr/sbin).
find_bin() {
	local name=$1 d
	if command -v "$name" >/dev/null 2>&1; then
		command -v "$name"
		return
	fi
	for d in /usr/sbin /usr/local/sbin /usr/bin /usr/local/bin; do
		if [ -x "$d/$name" ]; then
			echo "$d/$name"
			return
		fi
	done
	die "$name not found; run scripts/deps.sh"
}

# port_in_use PORT: whether something listens on 127.0.0.1:PORT.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
