/** The bench's progress lines, on stderr with the time of day (stdout carries the report). */
export const log = (s: string): void => {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${s}\n`)
}
