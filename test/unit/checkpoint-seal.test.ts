import { execFileSync } from 'node:child_process'
import { chmod, chown, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import {
  CheckpointSeal,
  defaultStateKeyFile,
  keyFileProblems,
  loadCheckpointSeal,
  MAX_KEY_FILE_BYTES,
  type CheckpointBinding,
} from '../../src/migrator/freeze/checkpoint-seal.js'
import { capturingLogger } from '../helpers/log-capture.js'

const binding: CheckpointBinding = {
  crdUid: 'uid-1',
  targetStorageVersion: 'v2',
  frozenGeneration: 3,
  startedAt: '2026-11-23T09:00:00.000Z',
}
const key = Buffer.alloc(32, 7)

t.test('a seal verifies only for the same key, checkpoint and freeze', async (t) => {
  const seal = CheckpointSeal.fromKey(key, 'test')
  const mac = seal.seal(binding, 'ns/obj-00099')
  t.ok(seal.verify(binding, 'ns/obj-00099', mac))
  t.notOk(seal.verify(binding, 'ns/obj-00100', mac), 'another checkpoint')
  for (const [field, value] of [
    ['crdUid', 'uid-2'],
    ['targetStorageVersion', 'v3'],
    ['frozenGeneration', 4],
    ['startedAt', '2026-11-23T09:00:01.000Z'],
  ] as const) {
    t.notOk(seal.verify({ ...binding, [field]: value }, 'ns/obj-00099', mac), `another ${field}`)
  }
  t.notOk(CheckpointSeal.fromKey(Buffer.alloc(32, 8), 'other').verify(binding, 'ns/obj-00099', mac), 'another key')
  t.notOk(seal.verify(binding, 'ns/obj-00099', undefined), 'no seal')
  t.notOk(seal.verify(binding, 'ns/obj-00099', `${mac}x`), 'a longer seal')
  t.notOk(seal.verify(binding, 'ns/obj-00099', ''), 'an empty seal')
  t.notOk(CheckpointSeal.ephemeral().verify(binding, 'ns/obj-00099', mac), 'a process of its own trusts only itself')
})

t.test('a key shorter than 16 bytes is refused', async (t) => {
  t.throws(() => CheckpointSeal.fromKey(Buffer.alloc(8), '/etc/key'), /the state key from \/etc\/key has 8 byte\(s\); it needs at least 16/)
})

t.test('loadCheckpointSeal: an explicit file, trailing newline ignored; unreadable is an error', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'seal-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const { logger } = capturingLogger()
  await writeFile(join(dir, 'key'), 'k'.repeat(32) + '\n')
  const fromFile = await loadCheckpointSeal(join(dir, 'key'), logger)
  t.equal(fromFile.source, join(dir, 'key'))
  t.ok(
    fromFile.verify(binding, 'a/b', CheckpointSeal.fromKey(Buffer.from('k'.repeat(32)), 'same').seal(binding, 'a/b')),
    'the newline is not key material',
  )
  await t.rejects(
    loadCheckpointSeal(join(dir, 'missing'), logger),
    /cannot read the state key file .*missing \(migrator\.stateKeyFile\): ENOENT/,
  )
})

t.test('loadCheckpointSeal: only a regular file of at most 64 KiB; a FIFO or /dev/zero is refused at once, not waited on', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'seal-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const { logger } = capturingLogger()
  const fifo = join(dir, 'fifo')
  execFileSync('mkfifo', ['-m', '600', fifo])
  // Opened the old way, a FIFO without a writer held start-up forever: this test would time out.
  const refusals: Array<[string, string, RegExp]> = [
    ['a FIFO', fifo, /the state key file .*fifo is a FIFO, not a regular file/],
    ['/dev/zero', '/dev/zero', /the state key file \/dev\/zero is a character device, not a regular file/],
    ['a directory', dir, /is a directory, not a regular file/],
  ]
  for (const [what, file, message] of refusals) {
    await t.rejects(loadCheckpointSeal(file, logger), { code: 'CRDM_STATE_KEY', message }, what)
  }
  await writeFile(join(dir, 'large'), Buffer.alloc(MAX_KEY_FILE_BYTES + 1, 0x6b))
  await t.rejects(
    loadCheckpointSeal(join(dir, 'large'), logger),
    { code: 'CRDM_STATE_KEY', message: /holds more than 65536 bytes: not a key file/ },
    'one byte past 64 KiB',
  )
  await writeFile(join(dir, 'bound'), Buffer.alloc(MAX_KEY_FILE_BYTES, 0x6b))
  t.equal((await loadCheckpointSeal(join(dir, 'bound'), logger)).source, join(dir, 'bound'), '64 KiB exactly is read')
  await symlink(join(dir, 'bound'), join(dir, 'link'))
  t.equal((await loadCheckpointSeal(join(dir, 'link'), logger)).source, join(dir, 'link'), 'through a symlink, as a Secret mount has it')
})

t.test('loadCheckpointSeal without a file: the default file is created once and reused', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'seal-home-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const saved = process.env['XDG_STATE_HOME']
  process.env['XDG_STATE_HOME'] = dir
  t.teardown(() => {
    if (saved === undefined) delete process.env['XDG_STATE_HOME']
    else process.env['XDG_STATE_HOME'] = saved
  })
  const { logger } = capturingLogger()
  const file = defaultStateKeyFile()
  t.equal(file, join(dir, 'crd-migrator', 'state.key'))
  const [a, b] = await Promise.all([loadCheckpointSeal(undefined, logger), loadCheckpointSeal(undefined, logger)])
  t.equal(a.source, file)
  const mac = a.seal(binding, 'x/y')
  t.ok(b.verify(binding, 'x/y', mac), 'two processes starting at once share the key')
  t.ok((await loadCheckpointSeal(undefined, logger)).verify(binding, 'x/y', mac), 'a later run trusts it too')
  t.ok((await readFile(file)).length >= 32)
})

t.test('loadCheckpointSeal: loaders starting at once all get the one key, never an empty or a private one', async (t) => {
  // fs.writeFile opens (creating the file) and then writes. The key file used to be
  // created under its final name that way, so a loader starting at the same moment could
  // read it empty and fall back to a key of its own (CI caught it once). Here every
  // writeFile waits between the two steps, which makes that moment long enough to hit.
  const real = await import('node:fs/promises')
  const slowWriteFile: typeof real.writeFile = async (file, data, options) => {
    const flag = typeof options === 'object' && options?.flag ? options.flag : 'w'
    const mode = typeof options === 'object' && options?.mode !== undefined ? options.mode : 0o666
    const handle = await real.open(file as string, flag, mode)
    try {
      // A sleep is the tool here: it widens the window between create and write that the
      // race needs, whatever the loaders do meanwhile (there is no event to wait for).
      await new Promise((r) => setTimeout(r, 20))
      await handle.writeFile(data)
    } finally {
      await handle.close()
    }
  }
  const seals = await t.mockImport<typeof import('../../src/migrator/freeze/checkpoint-seal.js')>(
    '../../src/migrator/freeze/checkpoint-seal.js',
    {
      'node:fs/promises': { ...real, writeFile: slowWriteFile },
    },
  )
  const root = await mkdtemp(join(tmpdir(), 'seal-race-'))
  t.teardown(() => rm(root, { recursive: true, force: true }))
  const saved = process.env['XDG_STATE_HOME']
  t.teardown(() => {
    if (saved === undefined) delete process.env['XDG_STATE_HOME']
    else process.env['XDG_STATE_HOME'] = saved
  })
  const { logger, lines } = capturingLogger()
  let disagreements = 0
  for (let round = 0; round < 5; round++) {
    process.env['XDG_STATE_HOME'] = join(root, String(round))
    const loaded = await Promise.all(Array.from({ length: 4 }, () => seals.loadCheckpointSeal(undefined, logger)))
    const mac = loaded[0]!.seal(binding, 'x/y')
    disagreements += loaded.filter((s) => !s.verify(binding, 'x/y', mac) || s.source !== defaultStateKeyFile()).length
  }
  t.equal(disagreements, 0, 'every loader of a round shares the key from the file')
  t.same(lines(), [], 'no loader fell back to memory')
  t.same(await readdir(join(root, '0', 'crd-migrator')), ['state.key'], 'no temporary file is left behind')
})

t.test('loadCheckpointSeal falls back to memory where the default file cannot be written', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'seal-ro-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // A state "directory" that is a file: no key file can be made below it, not even as root.
  await writeFile(join(dir, 'not-a-dir'), 'x')
  const saved = process.env['XDG_STATE_HOME']
  process.env['XDG_STATE_HOME'] = join(dir, 'not-a-dir')
  t.teardown(() => {
    if (saved === undefined) delete process.env['XDG_STATE_HOME']
    else process.env['XDG_STATE_HOME'] = saved
  })
  const { logger, lines } = capturingLogger()
  const seal = await loadCheckpointSeal(undefined, logger)
  t.match(seal.source, /memory/)
  t.match(lines().at(-1)?.['msg'], /checkpoints written by other processes will be re-verified/)
})

t.test('keyFileProblems: what others could do with the key file or its directory', async (t) => {
  const self = { uid: 1000, gid: 1000 }
  const file = (mode: number, uid = 1000, gid = 1000) => keyFileProblems({ mode: 0o100000 | mode, uid, gid }, 'file', self)
  const dir = (mode: number, uid = 1000, gid = 1000) => keyFileProblems({ mode: 0o040000 | mode, uid, gid }, 'directory', self)
  t.strictSame(file(0o600), [], '0600, ours')
  t.strictSame(file(0o400), [], '0400, ours')
  t.strictSame(file(0o440, 0, 1000), [], "root's, readable by our own group: a Secret the kubelet mounts with fsGroup = our group")
  t.strictSame(file(0o644), ['readable by others'])
  t.strictSame(file(0o606), ['readable and writable by others'])
  t.strictSame(file(0o640, 1000, 50), ['readable by group 50'], 'a group other than ours')
  t.strictSame(file(0o620, 1000, 50), ['writable by group 50'])
  t.strictSame(file(0o600, 1001), ["owned by uid 1001, not this process's (1000) or root"])
  t.strictSame(file(0o644, 1001, 50), [
    "owned by uid 1001, not this process's (1000) or root",
    'readable by others',
    'readable by group 50',
  ])
  t.strictSame(dir(0o700), [])
  t.strictSame(dir(0o755), [], 'a directory others can list gives no key away')
  t.strictSame(dir(0o1777, 0, 0), [], 'sticky (a Secret volume, /tmp): nobody replaces what is not theirs')
  t.strictSame(dir(0o777), ['writable by others without the sticky bit (the key could be replaced)'])
  t.strictSame(dir(0o770, 1000, 50), ['writable by group 50 without the sticky bit (the key could be replaced)'])
  t.strictSame(dir(0o770), [], 'writable by our own group')
  t.strictSame(dir(0o700, 1001), ["owned by uid 1001, not this process's (1000) or root"])
})

t.test('loadCheckpointSeal: a key file others can read is warned about, and refused when strict', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'seal-perm-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await chmod(dir, 0o700)
  const file = join(dir, 'key')
  await writeFile(file, 'k'.repeat(32), { mode: 0o600 })
  await chmod(file, 0o600)

  const quiet = capturingLogger()
  await loadCheckpointSeal(file, quiet.logger, { strict: true })
  t.strictSame(
    quiet.lines().filter((l) => l['level'] === 40),
    [],
    'a 0600 key in a 0700 directory: no warning, and strict takes it',
  )

  await chmod(file, 0o644)
  const loose = capturingLogger()
  const seal = await loadCheckpointSeal(file, loose.logger)
  t.equal(seal.source, file, 'not strict: used')
  const warning = loose.lines().find((l) => l['level'] === 40)
  t.match(warning?.['msg'], /the state key file could be read or replaced by others/)
  t.match(warning?.['file'], file)
  t.match(warning?.['found'], [{ path: file, mode: '0644', problems: ['readable by others'] }], 'naming the file and its mode')

  await t.rejects(
    loadCheckpointSeal(file, loose.logger, { strict: true }),
    {
      code: 'CRDM_STATE_KEY',
      message: /refusing the state key file .*key \(migrator\.strictStateKeyFile\): .*mode 0644.*readable by others/,
    },
    'strict: refused',
  )

  await chmod(file, 0o600)
  await chmod(dir, 0o777)
  await t.rejects(
    loadCheckpointSeal(file, loose.logger, { strict: true }),
    /mode 0777.*writable by others without the sticky bit/,
    'a directory anyone may write to: the key could be replaced',
  )
  await chmod(dir, 0o1777)
  await loadCheckpointSeal(file, loose.logger, { strict: true })
  t.pass('the same directory with the sticky bit (a Secret volume) is fine')
  await chmod(dir, 0o700)

  // Through a symlink, as the kubelet mounts Secrets: the real file and its directory count.
  const real = join(dir, '..data')
  await mkdir(real, { mode: 0o777 })
  await chmod(real, 0o777)
  await writeFile(join(real, 'key'), 'k'.repeat(32), { mode: 0o600 })
  await symlink(join('..data', 'key'), join(dir, 'linked'))
  await t.rejects(loadCheckpointSeal(join(dir, 'linked'), loose.logger, { strict: true }), /\.\.data \(mode 0777/)

  if (process.getuid?.() === 0) {
    await chown(file, 4242, 4242)
    await t.rejects(loadCheckpointSeal(file, loose.logger, { strict: true }), /owned by uid 4242, not this process's \(0\) or root/)
  } else {
    t.comment('not root: no file of another owner can be made here')
  }
})

t.test('loadCheckpointSeal: the default key file is checked too; strict refuses instead of falling back to memory', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'seal-home-perm-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const saved = process.env['XDG_STATE_HOME']
  process.env['XDG_STATE_HOME'] = dir
  t.teardown(() => {
    if (saved === undefined) delete process.env['XDG_STATE_HOME']
    else process.env['XDG_STATE_HOME'] = saved
  })
  const { logger, lines } = capturingLogger()
  await loadCheckpointSeal(undefined, logger, { strict: true })
  t.equal(lines().filter((l) => l['level'] === 40).length, 0, 'the file it creates (0600 in a 0700 directory) passes')
  await chmod(defaultStateKeyFile(), 0o644)
  await t.rejects(loadCheckpointSeal(undefined, logger, { strict: true }), { code: 'CRDM_STATE_KEY' })
  t.equal((await loadCheckpointSeal(undefined, logger)).source, defaultStateKeyFile(), 'not strict: used, with a warning')
})
