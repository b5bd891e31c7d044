/**
 * pino's JSON lines re-rendered as `time LEVEL message key=value ...`, so both formats carry
 * the same fields. Not pino-pretty: megabytes and a worker thread per process. Nothing
 * invisible reaches the terminal raw (sanitize.ts).
 */
import { escapeInvisible, plainText } from './sanitize.js'

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' }
const ERROR_LEVEL = 50

/** pino's own fields, shown in their places or left out (pid, hostname, the logger's name). */
const OMITTED = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'name'])

/** A string that reads the same bare: no white space, quote, `=`, backslash, control or format character. */
const BARE = /^[^\s"=\\\p{Cc}\p{Cf}]+$/u

/** A value as it reads after `key=`: bare when that is unambiguous and visible, JSON otherwise. */
export function formatValue(value: unknown): string {
  if (typeof value === 'string') return BARE.test(value) ? value : escapeInvisible(JSON.stringify(value))
  if (value === null || typeof value !== 'object') return String(value)
  return escapeInvisible(JSON.stringify(value))
}

/** pino's error serializer's shape: {type, message, stack, ...own fields}. */
function isSerializedError(value: unknown): value is { message: string; stack?: string; code?: unknown } {
  return typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string' && 'type' in value
}

/**
 * One JSON line of pino (with or without its newline) as one text line (with a newline).
 * A line that is not a JSON object passes through as it is.
 */
export function formatLogLine(line: string): string {
  let entry: Record<string, unknown>
  try {
    entry = JSON.parse(line) as Record<string, unknown>
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`
  }
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) return line.endsWith('\n') ? line : `${line}\n`
  const level = typeof entry.level === 'number' ? entry.level : 0
  const parts: string[] = []
  if (typeof entry.time === 'number') parts.push(new Date(entry.time).toISOString())
  else if (typeof entry.time === 'string') parts.push(entry.time)
  parts.push((LEVELS[level] ?? 'LOG').padEnd(5))
  if (typeof entry.msg === 'string' && entry.msg !== '') parts.push(plainText(entry.msg))
  const stacks: string[] = []
  for (const [key, value] of Object.entries(entry)) {
    if (OMITTED.has(key) || value === undefined) continue
    if (isSerializedError(value)) {
      parts.push(`${key}=${formatValue(value.message)}`)
      if (value.code !== undefined) parts.push(`${key}.code=${formatValue(value.code)}`)
      if (level >= ERROR_LEVEL && typeof value.stack === 'string') stacks.push(value.stack)
      continue
    }
    parts.push(`${key}=${formatValue(value)}`)
  }
  const stackLines = stacks.flatMap((s) => s.split('\n').map((l) => `    ${plainText(l.trimStart())}`))
  return [parts.join(' '), ...stackLines].join('\n') + '\n'
}
