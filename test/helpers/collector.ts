import { Writable } from 'node:stream'

/** A stream keeping what was written: a command's output, read back by the test. */
export function collector(): { stream: Writable; text: () => string } {
  let text = ''
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      text += chunk.toString()
      done()
    },
  })
  return { stream, text: () => text }
}
