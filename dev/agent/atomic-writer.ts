/**
 * The kubelet's atomic writer, small: a volume directory whose files all change at once.
 *
 *   <dir>/..2026_01_01_00_00_00.123456789/<files>   one directory per version
 *   <dir>/..data -> ..2026_...                       swapped by rename(2), atomically
 *   <dir>/<top-level name> -> ..data/<top-level name>
 *
 * A reader that opens `<dir>/token` sees the old or the new version, never a mix, and a
 * bind mount of `<dir>` (sandbox.ts) shows every update without being mounted again: the
 * Secret and token rotation that crd-migrator's webhook and client rely on.
 */
import { chmod, chown, lstat, mkdir, readdir, readFile, readlink, rename, rm, stat, symlink, writeFile } from 'node:fs/promises'
import { dirname, join, normalize, sep } from 'node:path'

export interface VolumeFile {
  data: Buffer
  /** Permission bits (e.g. 0o644). */
  mode: number
}

/** Refuses paths that leave the volume or touch the writer's own names. */
function checkPath(path: string): string {
  const p = normalize(path)
  if (p.startsWith('..') || p.startsWith(sep) || p === '.' || p.split(sep).some((s) => s === '..')) {
    throw new Error(`volume file path ${JSON.stringify(path)} must be relative and stay inside the volume`)
  }
  return p
}

let seq = 0

/**
 * Write `files` as the new version of `dir` (created 0755 when missing); files owned by
 * root and group `gid` when given. Returns false (nothing written) when the content is the
 * same as the current version's.
 */
export async function writeAtomically(dir: string, files: Map<string, VolumeFile>, gid?: number): Promise<boolean> {
  await mkdir(dir, { recursive: true, mode: 0o755 })
  const entries = [...files].map(([p, f]) => [checkPath(p), f] as const)
  const current = await currentVersion(dir)
  if (current && (await sameContent(join(dir, current), entries))) return false

  const stamp = new Date().toISOString().replace(/[-:T]/g, '_').replace('Z', '')
  const version = `..${stamp}_${process.pid}_${seq++}`
  const vdir = join(dir, version)
  await mkdir(vdir, { mode: 0o755 })
  for (const [p, f] of entries) {
    const file = join(vdir, p)
    await mkdir(dirname(file), { recursive: true, mode: 0o755 })
    await writeFile(file, f.data, { mode: f.mode })
    await chmod(file, f.mode)
    if (gid !== undefined) await chown(file, 0, gid)
  }
  const tmp = join(dir, '..data_tmp')
  await rm(tmp, { force: true })
  await symlink(version, tmp)
  await rename(tmp, join(dir, '..data'))

  const top = new Set(entries.map(([p]) => p.split(sep)[0]!))
  for (const name of top) {
    const link = join(dir, name)
    const exists = await lstat(link).then(
      () => true,
      () => false,
    )
    if (!exists) await symlink(join('..data', name), link)
  }
  for (const name of await readdir(dir)) {
    if (name === '..data' || name === version) continue
    if (name.startsWith('..') || !top.has(name)) await rm(join(dir, name), { recursive: true, force: true })
  }
  return true
}

async function currentVersion(dir: string): Promise<string | undefined> {
  try {
    return await readlink(join(dir, '..data'))
  } catch {
    return undefined
  }
}

async function sameContent(vdir: string, entries: ReadonlyArray<readonly [string, VolumeFile]>): Promise<boolean> {
  try {
    const listed = await listFiles(vdir)
    if (listed.length !== entries.length) return false
    for (const [p, f] of entries) {
      const file = join(vdir, p)
      const [data, st] = await Promise.all([readFile(file), stat(file)])
      if (!data.equals(f.data) || (st.mode & 0o7777) !== f.mode) return false
    }
    return true
  } catch {
    return false
  }
}

async function listFiles(dir: string, prefix = ''): Promise<string[]> {
  const out: string[] = []
  for (const e of await readdir(dir, { withFileTypes: true })) {
    if (e.isDirectory()) out.push(...(await listFiles(join(dir, e.name), join(prefix, e.name))))
    else out.push(join(prefix, e.name))
  }
  return out
}
