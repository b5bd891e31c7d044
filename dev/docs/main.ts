/**
 * npm run docs: writes the generated references under docs/reference/ (dev/docs/reference.ts)
 * and the chart's values README (dev/chart-docs.ts). `--check` exits 1 when one is stale.
 */
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { chartReadme } from '../chart-docs.js'
import { referencePages } from './reference.js'

export const ROOT = fileURLToPath(new URL('../../', import.meta.url).href.replace(/\/dist-dev\/$/, '/'))

function main(args: string[]): number {
  const chart = chartReadme(path.join(ROOT, 'charts/crd-migrator'))
  const pages = [
    ...referencePages().map((p) => ({ file: path.join(ROOT, p.file), text: p.text })),
    { file: chart.file, text: chart.expected },
  ]
  let stale = 0
  for (const { file, text } of pages) {
    let current: string | undefined
    try {
      current = readFileSync(file, 'utf8')
    } catch {
      current = undefined // not written yet
    }
    const rel = path.relative(process.cwd(), file)
    if (current === text) continue
    stale++
    if (args.includes('--check')) process.stderr.write(`${rel} is out of date: run npm run docs\n`)
    else {
      mkdirSync(path.dirname(file), { recursive: true })
      writeFileSync(file, text)
      process.stdout.write(`wrote ${rel}\n`)
    }
  }
  if (stale === 0) process.stdout.write('docs up to date\n')
  return args.includes('--check') && stale > 0 ? 1 : 0
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = main(process.argv.slice(2))
