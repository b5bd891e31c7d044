#!/usr/bin/env node
/** kubectl (1.26+) completes `kubectl crd-migrator ...` by running this from PATH with the words after the plugin's name, reading what `__complete` prints. */
import { buildProgram } from './program.js'
import { PLUGIN_NAME } from './program-name.js'
import { runComplete } from './complete/complete.js'

await runComplete(buildProgram(PLUGIN_NAME), process.argv.slice(2))
