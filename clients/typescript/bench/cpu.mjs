// CPU time spent per slice, on both sides: this process (process.cpuUsage) and the database's
// client backends (utime + stime from /proc/PID/stat: the benchmark runs on the database's
// machine). CPU time, unlike wall time, is not inflated by other work on a shared machine, so it
// says where an append's time goes: the client library, the server, or waiting between them.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const TICK_MS = 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

function procCpuMs(pid) {
  try {
    // Fields after the command name (which may hold spaces, inside parentheses).
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return 0; // the backend exited
  }
}

/** Snapshots the CPU time so far; `monitor` is a pg.Client of its own (excluded). */
export async function cpuSnapshot(monitor) {
  const { rows } = await monitor.query(
    `SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`,
  );
  const server = new Map(rows.map((r) => [r.pid, procCpuMs(r.pid)]));
  return { client: process.cpuUsage(), server };
}

/** CPU milliseconds since `before`: { client, server }. */
export async function cpuSince(monitor, before) {
  const after = await cpuSnapshot(monitor);
  const c = process.cpuUsage(before.client);
  let server = 0;
  for (const [pid, ms] of after.server) server += ms - (before.server.get(pid) ?? 0);
  return { client: (c.user + c.system) / 1000, server };
}
