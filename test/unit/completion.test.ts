/**
 * `crd-migrator completion bash|zsh|fish`, from the CLI itself (the TypeScript source through
 * tap's loader, process.execArgv, not a possibly stale dist/): each script is produced, and
 * each shell that is installed reads it and completes with it.
 */
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const root = fileURLToPath(new URL('../../', import.meta.url))
const main = join(root, 'src', 'cli', 'main.ts')

function cli(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [...process.execArgv, main, ...args], { cwd: root, encoding: 'utf8' })
}

function inShell(shell: string, args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(shell, args, { encoding: 'utf8' })
}

/** A shell test runs where the shell is installed (bash always is; zsh and fish may not be). */
const unless = (shell: string) => (spawnSync(shell, ['-c', 'exit 0']).error ? `${shell} is not installed` : false)

const scripts: Record<string, string> = {}
function script(shell: string): string {
  const text = scripts[shell]
  if (text === undefined) throw new Error(`completion ${shell} produced no script`)
  return text
}
for (const shell of ['bash', 'zsh', 'fish']) {
  t.test(`completion ${shell}: a script naming every command`, async (t) => {
    const r = cli('completion', shell)
    t.equal(r.status, 0, 'exit 0', { stderr: r.stderr })
    for (const command of ['serve', 'migrate', 'status', 'webhook-config', 'completion']) t.match(r.stdout, command, `names ${command}`)
    t.match(r.stdout, 'log-format', 'names an option')
    scripts[shell] = r.stdout
  })
}

t.test('completion with another shell, or none, is a usage error', async (t) => {
  t.equal(cli('completion', 'powershell').status, 2)
  t.equal(cli('completion').status, 2)
})

t.test('bash: the sourced script completes command names, options and option values', async (t) => {
  const file = join(t.testdir(), 'crd-migrator.bash')
  writeFileSync(file, script('bash'))
  const complete = (words: string[]) => {
    const array = words.map((w) => `'${w}'`).join(' ')
    const r = inShell('bash', [
      '-c',
      `source '${file}'; COMP_WORDS=(${array}); COMP_CWORD=${words.length - 1}; _crd_migrator; echo "\${COMPREPLY[@]}"`,
    ])
    t.equal(r.status, 0, `${words.join(' ')}: bash exit 0`, { stderr: r.stderr })
    return r.stdout.trim()
  }
  t.equal(complete(['crd-migrator', 'mig']), 'migrate', 'a command name')
  t.equal(complete(['crd-migrator', 'st']), 'status')
  t.equal(complete(['crd-migrator', 'migrate', '--log-f']), '--log-format', 'an option of the command')
  t.equal(complete(['crd-migrator', 'migrate', '--webhook-p']), '', 'not an option of another command (serve)')
  t.equal(complete(['crd-migrator', 'migrate', '-o', '']), 'text name json yaml', 'the choices of an option')
  t.equal(complete(['crd-migrator', 'migrate', '--engine', '']), 'own builtin', 'the choices of a setting, from the schema')
  t.equal(complete(['crd-migrator', 'migrate', '--kubeconfig', '']), '', 'a free value: nothing (bash falls back to file names)')
  t.equal(complete(['crd-migrator', 'completion', 'z']), 'zsh', 'the choices of an argument')
})

t.test('zsh: the script parses and, sourced after compinit, registers its function', { skip: unless('zsh') }, async (t) => {
  const file = join(t.testdir(), '_crd-migrator')
  writeFileSync(file, script('zsh'))
  const r = inShell('zsh', ['-f', '-c', `autoload -U compinit; compinit -u -D; source '${file}'; print -r -- $_comps[crd-migrator]`])
  t.equal(r.status, 0, 'zsh exit 0', { stderr: r.stderr })
  t.equal(r.stdout.trim(), '_crd_migrator', 'compdef _crd_migrator crd-migrator')
})

t.test('fish: the sourced script completes command names, options and their values', { skip: unless('fish') }, async (t) => {
  const file = join(t.testdir(), 'crd-migrator.fish')
  writeFileSync(file, script('fish'))
  const complete = (line: string) => {
    const r = inShell('fish', ['--no-config', '-c', `source '${file}'; complete -C '${line}'`])
    t.equal(r.status, 0, `${line}: fish exit 0`, { stderr: r.stderr })
    return r.stdout
      .trim()
      .split('\n')
      .map((l) => l.split('\t')[0])
  }
  t.same(complete('crd-migrator mig'), ['migrate'], 'a command name')
  t.same(complete('crd-migrator migrate --log-f'), ['--log-format'], 'an option of the command')
  t.same(complete('crd-migrator migrate -o ').sort(), ['json', 'name', 'text', 'yaml'], 'the choices of an option')
  t.same(complete('crd-migrator completion ').sort(), ['bash', 'fish', 'zsh'], 'the choices of an argument')
})
