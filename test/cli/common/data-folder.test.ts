import { describe, expect, it } from 'vitest';
import { platformDataDir } from '../../../src/cli/common/data-folder.js';

describe('the platform\'s data folder', () => {
  it('Windows: %LOCALAPPDATA%\\gpumesh, else AppData\\Local under the profile', () => {
    expect(platformDataDir('win32', { LOCALAPPDATA: 'C:\\Users\\Ana Lopez\\AppData\\Local' }, 'C:\\Users\\Ana Lopez')).toBe('C:\\Users\\Ana Lopez\\AppData\\Local\\gpumesh');
    expect(platformDataDir('win32', {}, 'C:\\Users\\ana')).toBe('C:\\Users\\ana\\AppData\\Local\\gpumesh');
  });

  it('macOS: ~/Library/Application Support/gpumesh', () => {
    expect(platformDataDir('darwin', { XDG_DATA_HOME: '/elsewhere' }, '/Users/ana')).toBe('/Users/ana/Library/Application Support/gpumesh');
  });

  it('Linux and the rest: $XDG_DATA_HOME/gpumesh when absolute, else ~/.local/share/gpumesh', () => {
    expect(platformDataDir('linux', { XDG_DATA_HOME: '/data/ana' }, '/home/ana')).toBe('/data/ana/gpumesh');
    expect(platformDataDir('linux', { XDG_DATA_HOME: 'relative/share' }, '/home/ana')).toBe('/home/ana/.local/share/gpumesh');
    expect(platformDataDir('freebsd', {}, '/home/ana')).toBe('/home/ana/.local/share/gpumesh');
  });
});
