import type { Command } from 'commander'
import { VERSION } from '../../version.js'
import { describeError, errorCode } from '../../errors.js'
import { plainText } from '../../sanitize.js'
import { isData, jsonOption, outputFormat, outputOption, renderData } from '../output.js'
import { flagReader, shortCommand, shortCommandSetup, type FlagValues } from '../command-kit.js'

export const VERSION_SETTINGS = ['kubeconfig', 'context', 'connect-attempts'] as const

/** What the API server's GET /version answers (k8s.io/apimachinery version.Info), as far as it is shown. */
interface ServerVersion {
  gitVersion?: string
  [key: string]: unknown
}

/** `version`, as kubectl's (docs/commands.md#version): the client version is printed even when the server cannot be asked. */
export function registerVersion(program: Command): void {
  shortCommand(program.command('version'), VERSION_SETTINGS)
    .description("print crd-migrator's version and the API server's (reads only)")
    .option('--client', "this client's version only; the API server is not asked", false)
    .addOption(outputOption())
    .addOption(jsonOption())
    .action(async (opts: FlagValues, cmd: Command) => {
      const format = outputFormat(opts)
      const clientVersion = { version: VERSION }
      let serverVersion: ServerVersion | undefined
      let failure: unknown
      if (!flagReader(opts).on('client')) {
        try {
          const { config, log, client } = shortCommandSetup(cmd, opts)
          const { closing, commandHttp } = await import('../command-http.js')
          serverVersion = await closing(
            commandHttp(config, 'version', log, client),
            async (http) => (await http.request<ServerVersion>({ method: 'GET', path: '/version' })).body,
          )
        } catch (err) {
          failure = err
        }
      }
      const data = { clientVersion, ...(serverVersion ? { serverVersion } : {}) }
      if (isData(format)) process.stdout.write(renderData(data, format))
      else {
        process.stdout.write(`Client Version: ${VERSION}\n`)
        if (serverVersion) process.stdout.write(`Server Version: ${plainText(String(serverVersion.gitVersion ?? '?'))}\n`)
      }
      if (failure !== undefined) {
        // Usage errors (a bad flag value) stay exit 2: main.ts's one exit path.
        if (errorCode(failure) === 'CRDM_CONFIG_INVALID') throw failure as Error
        process.stderr.write(`crd-migrator: cannot get the API server's version: ${plainText(describeError(failure))}\n`)
        process.exitCode = 1
      }
    })
}
