/**
 * The README is short and points into docs/; docs/ and its generated references document
 * everything a user meets: every setting, annotation, metric and error code, every page
 * reachable from the index, every link pointing at a file and heading that exist.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Registry } from 'prom-client'
import t from 'tap'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { SETTINGS } from '../../src/config/settings.js'
import { ERROR_CODES } from '../../src/errors.js'
import { createMigratorMetrics } from '../../src/migrator/metrics.js'
import { createWebhookMetrics } from '../../src/webhook/metrics.js'
import { createProcessMetrics } from '../../src/health/process-metrics.js'

const root = fileURLToPath(new URL('../../', import.meta.url))

function read(file: string): string {
  try {
    return readFileSync(join(root, file), 'utf8')
  } catch (err) {
    t.fail(`${file} cannot be read: ${(err as Error).message}`)
    return ''
  }
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
/** The name as a whole word: `--webhook` must not be satisfied by `--webhook-host`. */
const mentions = (text: string, name: string) => new RegExp(`(?<![\\w-])${escape(name)}(?![\\w-])`).test(text)

t.test('the README: short, the two commands as written, links into docs/', async (t) => {
  const readme = read('README.md')
  const lines = readme.split('\n').length - 1
  t.ok(lines <= 250, `README.md has ${lines} lines (at most 250: the rest belongs in docs/)`)
  t.match(readme, /^npm ci && npm run build && npm start +#/m, 'the command that runs the demo')
  t.match(readme, /^npm test +#/m, 'the command that runs every test')
  t.match(readme, '(docs/README.md)', 'links the docs index')
})

t.test('every setting: its flag and its environment variable, in the configuration reference', async (t) => {
  const page = read('docs/reference/configuration.md')
  t.ok(SETTINGS.length > 20, 'the settings table is loaded')
  const names = SETTINGS.flatMap((s) => [`--${s.flag}`, s.env])
  t.strictSame(
    names.filter((n) => !mentions(page, n)),
    [],
    'docs/reference/configuration.md names every flag and environment variable (run npm run docs)',
  )
})

t.test('every state annotation, in the annotations reference', async (t) => {
  const page = read('docs/reference/annotations.md')
  const keys = Object.values(StateAnnotation)
  t.ok(keys.length >= 14, 'the annotation table is loaded')
  t.strictSame(
    keys.filter((k) => !mentions(page, k)),
    [],
    'docs/reference/annotations.md names every key (run npm run docs)',
  )
})

t.test('every metric, in the metrics reference', async (t) => {
  const page = read('docs/reference/metrics.md')
  const migrator = new Registry()
  createMigratorMetrics(migrator)
  const webhook = new Registry()
  createWebhookMetrics(webhook)
  const process = new Registry()
  createProcessMetrics(process)
  const names = [...migrator.getMetricsAsArray(), ...webhook.getMetricsAsArray(), ...process.getMetricsAsArray()].map((m) => m.name)
  t.ok(names.length >= 13, `the metrics are registered (${names.length})`)
  t.equal(new Set(names).size, names.length, 'no metric name registered twice')
  t.strictSame(
    names.filter((n) => !page.includes(`\`${n}\``)),
    [],
    'docs/reference/metrics.md names every metric (run npm run docs)',
  )
})

t.test('every error code has a row in troubleshooting, with its cause and what to do', async (t) => {
  const page = read('docs/troubleshooting.md')
  const codes = Object.keys(ERROR_CODES)
  t.ok(codes.length >= 20, `the error table is loaded (${codes.length})`)
  // | `CODE` | meaning | what to do |: three non-empty cells.
  const row = (code: string) => new RegExp(`^\\| \`${code}\` \\|[^|]*\\S[^|]*\\|.*\\S.*\\|$`, 'm')
  t.strictSame(
    codes.filter((c) => !row(c).test(page)),
    [],
    'docs/troubleshooting.md has a row for each code of src/errors.ts: add one for a new code',
  )
})

/** Markdown files of the README and docs/. */
function docFiles(): string[] {
  const out = ['README.md', 'SECURITY.md']
  const walk = (dir: string) => {
    for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
      const p = join(dir, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.name.endsWith('.md')) out.push(p)
    }
  }
  walk('docs')
  return out
}

/** GitHub's anchors of a markdown text's headings (fenced code left out). */
function anchors(text: string): Set<string> {
  const out = new Set<string>()
  let fenced = false
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced
    const m = fenced ? null : /^#{1,6} (.*)$/.exec(line)
    if (m) {
      out.add(
        m[1]!
          .toLowerCase()
          .replace(/[^\w\- ]/g, '')
          .replace(/ /g, '-'),
      )
    }
  }
  return out
}

t.test('every relative link of the README and docs/ points at a file and heading that exist', async (t) => {
  const files = docFiles()
  t.ok(files.length >= 15, `${files.length} pages`)
  const broken: string[] = []
  for (const file of files) {
    const text = read(file).replace(/```[\s\S]*?```/g, '')
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue
      const [path, anchor] = target!.split('#') as [string, string | undefined]
      const abs = path === '' ? join(root, file) : resolve(dirname(join(root, file)), path)
      if (!existsSync(abs)) broken.push(`${file}: ${target} (no such file)`)
      else if (anchor && abs.endsWith('.md') && !anchors(readFileSync(abs, 'utf8')).has(anchor)) {
        broken.push(`${file}: ${target} (no heading #${anchor} in ${relative(root, abs)})`)
      }
    }
  }
  t.strictSame(broken, [], 'no broken link')
})

t.test('the docs index links every page of docs/', async (t) => {
  const index = read('docs/README.md')
  const pages = docFiles()
    .filter((f) => f.startsWith('docs/') && f !== 'docs/README.md')
    .map((f) => relative('docs', f))
  t.strictSame(
    pages.filter((p) => !index.includes(`(${p})`)),
    [],
    'docs/README.md links each page',
  )
})
