export * from './paths';
export * from './scripted-upstream';
export * from './engine-contract';
