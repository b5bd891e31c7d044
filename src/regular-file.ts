/**
 * The one reader for files someone else names (kubeconfig, token, certificates, CA, state key),
 * so nothing about the file can hold the process:
 * - O_NONBLOCK: a FIFO otherwise waits for a writer for ever, in the event loop or a pool
 *   thread no deadline reaches; O_NOCTTY, so a named terminal never becomes ours.
 * - fstat before reading: anything but a regular file (/dev/zero never ends) is a {@link FileRefused}.
 * - a size bound: more is refused, not read to its end.
 * Open errors (ENOENT, EACCES) are thrown as they are, for the caller to say what the file was for.
 */
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs'
import { open } from 'node:fs/promises'
import { CrdMigratorError, type ErrorCode } from './errors.js'

const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY
const CHUNK_BYTES = 64 * 1024

/** Largest kubeconfig read (kubectl has no bound; a large one with many embedded certificates is a few MB). */
export const MAX_KUBECONFIG_BYTES = 16 * 1024 * 1024
/** Largest token, client certificate, client key or CA file read. */
export const MAX_CREDENTIAL_FILE_BYTES = 4 * 1024 * 1024
export const MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024

/** A file refused by what it is (not a regular file) or its size, never waited on or read to its end. */
export class FileRefused extends CrdMigratorError {
  override readonly name: string = 'FileRefused'
}

export interface RegularFileOptions {
  /** The file as the messages name it: `kubeconfig /path`, `the state key file /path`. */
  what: string
  /** The code of the refusal. */
  code: ErrorCode
  /** Bytes read at most; a file holding more is refused. */
  maxBytes: number
  /** What to do instead, after "is a FIFO, not a regular file: ". */
  hint?: string
  /** What a file over the bound is, after "holds more than N bytes: " (default: not read). */
  tooLarge?: string
}

/** What a file that is not a regular one is, for a message. */
function fileKind(st: Stats): string {
  if (st.isFIFO()) return 'a FIFO'
  if (st.isCharacterDevice()) return 'a character device'
  if (st.isBlockDevice()) return 'a block device'
  if (st.isSocket()) return 'a socket'
  if (st.isDirectory()) return 'a directory'
  return 'not a regular file'
}

function refuseIrregular(st: Stats, o: RegularFileOptions): void {
  if (!st.isFile())
    throw new FileRefused(
      o.code,
      `${o.what} is ${fileKind(st)}, not a regular file: ${o.hint ?? 'name a regular file (a FIFO or a device is refused, never waited on or read)'}`,
    )
}

function bounded(chunks: Buffer[], length: number, o: RegularFileOptions): Buffer {
  if (length > o.maxBytes) throw new FileRefused(o.code, `${o.what} holds more than ${o.maxBytes} bytes: ${o.tooLarge ?? 'not read'}`)
  return Buffer.concat(chunks, length)
}

/** `inspect` sees the opened file's Stats before the read (the state key's ownership and mode). */
export async function readRegularFile(file: string, o: RegularFileOptions, inspect?: (st: Stats) => Promise<void>): Promise<Buffer> {
  const handle = await open(file, OPEN_FLAGS)
  try {
    const st = await handle.stat()
    refuseIrregular(st, o)
    await inspect?.(st)
    const chunks: Buffer[] = []
    let length = 0
    while (length <= o.maxBytes) {
      const buffer = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, o.maxBytes + 1 - length))
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, length)
      if (bytesRead === 0) break
      chunks.push(buffer.subarray(0, bytesRead))
      length += bytesRead
    }
    return bounded(chunks, length, o)
  } finally {
    await handle.close()
  }
}

/** {@link readRegularFile} for synchronous callers (the kubeconfig, a cluster's CA file): the same checks, the same bound. */
export function readRegularFileSync(file: string, o: RegularFileOptions): Buffer {
  const fd = openSync(file, OPEN_FLAGS)
  try {
    refuseIrregular(fstatSync(fd), o)
    const chunks: Buffer[] = []
    let length = 0
    while (length <= o.maxBytes) {
      const buffer = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, o.maxBytes + 1 - length))
      const bytesRead = readSync(fd, buffer, 0, buffer.length, length)
      if (bytesRead === 0) break
      chunks.push(buffer.subarray(0, bytesRead))
      length += bytesRead
    }
    return bounded(chunks, length, o)
  } finally {
    closeSync(fd)
  }
}
