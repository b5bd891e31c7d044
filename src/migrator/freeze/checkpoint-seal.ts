/**
 * Checkpoints a resumed run may trust. A frozen CRD's checkpoint says "every object up to this
 * key is in the storage version": a resumed run skips those and later narrows storedVersions, so
 * whoever could write that annotation could make a run skip old-version objects. A run therefore
 * writes an HMAC of it (the seal), bound to the CRD's uid and this freeze (target version, frozen
 * generation, start time), with a key only migrators hold; without a valid seal the run walks
 * every object again (a no-op request each, no etcd write).
 *
 * The key: `migrator.stateKeyFile`, else a file in the user's state directory created on first use
 * (the same user's CLI resumes its own runs), else memory (docs/configuration.md, --state-key-file).
 *
 * Whoever reads the key can forge checkpoints, whoever replaces it can plant one: the file opened
 * is checked as sshd's StrictModes does (keyFileProblems; the rules: --strict-state-key-file there),
 * and warned about or refused. Read through regular-file.ts: never waited on (a FIFO), regular
 * files only, at most 64 KiB.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Stats } from 'node:fs'
import { link, mkdir, realpath, stat, unlink, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import { FileRefused, readRegularFile } from '../../regular-file.js'

/** What a seal is bound to: a checkpoint of another CRD or another freeze does not verify. */
export interface CheckpointBinding {
  crdUid: string
  targetStorageVersion: string
  frozenGeneration: number
  startedAt: string
}

const MIN_KEY_BYTES = 16
/** Largest state key file read: a key is 16 bytes or a few dozen; more is not a key file. */
export const MAX_KEY_FILE_BYTES = 64 * 1024
const DOMAIN = 'crd-migrator checkpoint v1'

export class CheckpointSeal {
  private constructor(
    private readonly key: Buffer,
    readonly source: string,
  ) {}

  static fromKey(key: Buffer, source: string): CheckpointSeal {
    if (key.length < MIN_KEY_BYTES)
      throw new CrdMigratorError(
        'CRDM_STATE_KEY',
        `the state key from ${source} has ${key.length} byte(s); it needs at least ${MIN_KEY_BYTES}`,
      )
    return new CheckpointSeal(key, source)
  }

  static ephemeral(): CheckpointSeal {
    return new CheckpointSeal(randomBytes(32), 'memory (this process only)')
  }

  seal(binding: CheckpointBinding, checkpoint: string): string {
    return createHmac('sha256', this.key)
      .update(
        [DOMAIN, binding.crdUid, binding.targetStorageVersion, String(binding.frozenGeneration), binding.startedAt, checkpoint].join('\n'),
      )
      .digest('base64url')
  }

  verify(binding: CheckpointBinding, checkpoint: string, seal: string | undefined): boolean {
    if (!seal) return false
    const expected = Buffer.from(this.seal(binding, checkpoint))
    const given = Buffer.from(seal)
    return expected.length === given.length && timingSafeEqual(expected, given)
  }
}

let processSeal: CheckpointSeal | undefined
/** The seal of callers that load no key (tests, the demo): trusted by this process only. */
export function processCheckpointSeal(): CheckpointSeal {
  return (processSeal ??= CheckpointSeal.ephemeral())
}

export function defaultStateKeyFile(env: NodeJS.ProcessEnv = process.env): string {
  const stateHome = env['XDG_STATE_HOME'] || path.join(os.homedir(), '.local', 'state')
  return path.join(stateHome, 'crd-migrator', 'state.key')
}

/**
 * The seal for `stateKeyFile` (it must be readable: the operator asked for it), else the default file (created when missing), else memory.
 * `strict`: refuse a key file others could read or replace (migrator.strictStateKeyFile), instead of warning.
 */
export async function loadCheckpointSeal(
  stateKeyFile: string | undefined,
  logger: Logger,
  options: { strict?: boolean } = {},
): Promise<CheckpointSeal> {
  const load = async (file: string) => CheckpointSeal.fromKey(trimKey(await readKeyFile(file, logger, options.strict === true)), file)
  if (stateKeyFile)
    return load(stateKeyFile).catch((err: NodeJS.ErrnoException) => {
      if (err instanceof CrdMigratorError) throw err
      throw new CrdMigratorError(
        'CRDM_STATE_KEY',
        `cannot read the state key file ${stateKeyFile} (migrator.stateKeyFile): ${err.code ?? err.message}`,
        { cause: err },
      )
    })
  const file = defaultStateKeyFile()
  // Missing: created (EEXIST: another process got there first), then read once more.
  for (let created = false; ; created = true) {
    try {
      return await load(file)
    } catch (err) {
      if (err instanceof FileRefused) throw err
      if (created || (err as NodeJS.ErrnoException).code !== 'ENOENT') return fallback(logger, file, err)
    }
    try {
      await mkdir(path.dirname(file), { recursive: true, mode: 0o700 })
      await publishKey(file)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return fallback(logger, file, err)
    }
  }
}

/** Who this process is, for the checks: a file's owner and group are its terms. */
type ProcessOwner = Pick<Stats, 'uid' | 'gid'>

/** Undefined where there are no uids (Windows). */
function processOwner(): ProcessOwner | undefined {
  return typeof process.getuid === 'function' && typeof process.getgid === 'function'
    ? { uid: process.getuid(), gid: process.getgid() }
    : undefined
}

/**
 * What is wrong with a key file (`kind: 'file'`) or the directory holding it, by its mode
 * and owner, for a process running as `self` (docs/configuration.md, --strict-state-key-file). Empty: nothing. Pure.
 */
export function keyFileProblems(st: Pick<Stats, 'mode' | 'uid' | 'gid'>, kind: 'file' | 'directory', self: ProcessOwner): string[] {
  const problems: string[] = []
  const otherGroup = st.gid !== self.gid
  if (st.uid !== self.uid && st.uid !== 0) problems.push(`owned by uid ${st.uid}, not this process's (${self.uid}) or root`)
  if (kind === 'file') {
    const access = (read: number, write: number) =>
      [st.mode & read ? 'readable' : '', st.mode & write ? 'writable' : ''].filter(Boolean).join(' and ')
    if (st.mode & 0o006) problems.push(`${access(0o004, 0o002)} by others`)
    if (otherGroup && st.mode & 0o060) problems.push(`${access(0o040, 0o020)} by group ${st.gid}`)
  } else if (!(st.mode & 0o1000)) {
    if (st.mode & 0o002) problems.push('writable by others without the sticky bit (the key could be replaced)')
    if (otherGroup && st.mode & 0o020) problems.push(`writable by group ${st.gid} without the sticky bit (the key could be replaced)`)
  }
  return problems
}

const octal = (mode: number) => `0${(mode & 0o7777).toString(8).padStart(3, '0')}`

/** Reads the key from the file it checked (one open, through regular-file.ts), warning about or refusing what keyFileProblems finds. */
async function readKeyFile(file: string, logger: Logger, strict: boolean): Promise<Buffer> {
  return readRegularFile(
    file,
    {
      what: `the state key file ${file}`,
      code: 'CRDM_STATE_KEY',
      maxBytes: MAX_KEY_FILE_BYTES,
      hint: 'name a file holding the key (the chart mounts one from a Secret)',
      tooLarge: 'not a key file',
    },
    async (st) => {
      const self = processOwner()
      if (self === undefined) return
      const found: Array<{ path: string; mode: string; uid: number; gid: number; problems: string[] }> = []
      const look = (where: string, st: Stats, kind: 'file' | 'directory') => {
        const problems = keyFileProblems(st, kind, self)
        if (problems.length > 0) found.push({ path: where, mode: octal(st.mode), uid: st.uid, gid: st.gid, problems })
      }
      look(file, st, 'file')
      const dirs = new Set([path.dirname(path.resolve(file)), path.dirname(await realpath(file))])
      for (const dir of dirs) look(dir, await stat(dir), 'directory')
      if (found.length === 0) return
      const text = found.map((f) => `${f.path} (mode ${f.mode}, uid ${f.uid}, gid ${f.gid}): ${f.problems.join(', ')}`).join('; ')
      if (strict) {
        throw new FileRefused(
          'CRDM_STATE_KEY',
          `refusing the state key file ${file} (migrator.strictStateKeyFile): ${text}; whoever can read the key can forge checkpoints, whoever can replace it can plant one`,
        )
      }
      logger.warn(
        { file, found },
        'the state key file could be read or replaced by others: whoever reads it can forge checkpoints (chmod 600 it, in a directory only its owner writes; migrator.strictStateKeyFile refuses such a file)',
      )
    },
  )
}

/**
 * Creates `file` with a new key, whole or not at all: written to a file of its own, then
 * hard-linked to the name (EEXIST when another process got there first). O_EXCL on the name
 * itself left a moment where a second process read an empty key and fell back to memory.
 */
async function publishKey(file: string): Promise<void> {
  const temporary = `${file}.${process.pid}.${randomBytes(6).toString('hex')}`
  await writeFile(temporary, randomBytes(32).toString('base64url'), { mode: 0o600, flag: 'wx' })
  try {
    await link(temporary, file)
  } finally {
    await unlink(temporary).catch(() => {})
  }
}

function fallback(logger: Logger, file: string, err: unknown): CheckpointSeal {
  logger.info(
    { file, err: errorMessage(err) },
    'no state key file (set migrator.stateKeyFile); checkpoints written by other processes will be re-verified object by object',
  )
  return CheckpointSeal.ephemeral()
}

/** A key file written by hand or from a Secret may end in a newline; it is not key material. */
function trimKey(key: Buffer): Buffer {
  let end = key.length
  while (end > 0 && (key[end - 1] === 0x0a || key[end - 1] === 0x0d)) end--
  return key.subarray(0, end)
}
