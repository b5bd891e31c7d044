// Lint: eslint's and typescript-eslint's recommended rules, type-aware, for the product
// (src/), the tooling (dev/), the tests and the scripts. Formatting is prettier's job
// (.prettierrc.json), so no stylistic rules here. `npm run lint` runs both; CI runs it.
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['dist/', 'dist-dev/', 'node_modules/', 'coverage/', '.tap/', 'bench/results/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // A leading underscore marks a parameter or binding kept on purpose (a signature, a rest split).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Fastify hooks, handlers and plugins are async by contract, with or without an await.
      '@typescript-eslint/require-await': 'off',
      // Passing on what a callee threw (typed unknown) is not inventing a non-Error.
      '@typescript-eslint/only-throw-error': ['error', { allowThrowingUnknown: true }],
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
    },
  },
  {
    // tap's idiom: t.test(name, async t => ...) is not awaited (tap queues it), and many
    // test bodies need no await; JSON bodies from the API server are read without types.
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-floating-promises': 'off',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/restrict-template-expressions': 'off',
      // Tests throw strings and plain objects on purpose, to see them handled.
      '@typescript-eslint/only-throw-error': 'off',
    },
  },
  {
    // Plain JavaScript (the scripts, this file) and declaration files: no type information.
    files: ['**/*.js', '**/*.mjs', '**/*.d.mts'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      parserOptions: { projectService: false },
      globals: { process: 'readonly', console: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', URL: 'readonly' },
    },
  },
)
