"""A process's CPU time and resident memory from /proc, for the cost scripts."""
import os


def cpu_seconds(pid):
    """User plus system CPU seconds the process has used."""
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')


def rss_mb(pid):
    """The process's resident set (VmRSS) in MB."""
    for line in open(f'/proc/{pid}/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
