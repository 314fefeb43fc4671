import { guardDifference, guardSignatureOf } from './guard';

const differ = (a: string, b: string) => guardDifference(guardSignatureOf(a), guardSignatureOf(b));

describe('guardSignatureOf', () => {
  it.each([
    ['Is it safe to take aspirin?', []],
    ['Is it not safe to take aspirin?', ['not']],
    ["Don't delete the file and never restart it", ["n't", 'never']],
    ['I can’t do it without help', ["n't", 'without']],
    ['No, nobody saw nothing', ['no', 'nobody', 'nothing']],
    ['Neither this nor that, cannot say', ['cannot', 'neither', 'nor']],
  ])('finds the negations of %j', (text, negations) => {
    expect(guardSignatureOf(text).negations).toEqual(negations);
  });

  it.each([
    ['Convert 5 miles to km', ['5']],
    ['Convert 1,000 miles and 2.5 km.', ['1000', '2.5']],
    ['It is -5 degrees, not 5', ['-5', '5']],
    ['pages 3-5', ['3', '5']],
    ['two apples and twenty pears', ['2', '20']],
    ['the first and the second try, twice', ['1st', '2nd', '2x']],
    ['gpt4 vs v35', ['4', '35']],
    ['a dozen eggs, half done', ['12', '0.5']],
  ])('finds the numbers of %j', (text, numbers) => {
    expect(guardSignatureOf(text).numbers).toEqual(numbers);
  });

  it.each([
    ['What is the capital of France?', ['France']],
    ['The weather in Paris. The weather in Rome', ['Paris', 'Rome']],
    ['Paris is lovely in spring', ['Paris']],
    ['What is NASA doing with the iPhone', ['NASA', 'iPhone']],
    ['I think I\'m right. I\'ll see', []],
    ['Tell me a story. Write it short: Make it fun', []],
    ['how does the heart work', []],
  ])('finds the named entities of %j', (text, entities) => {
    expect(guardSignatureOf(text).entities).toEqual(entities);
  });

  it.each([
    ['Translate "good morning" into French', ['good morning']],
    ['Say “hello” and ‘bye’ and «ciao»', ['bye', 'ciao', 'hello']],
    ["Replace 'foo' with `bar`", ['bar', 'foo']],
    ["don't won't it's the children's toys", []],
  ])('finds the quoted strings of %j', (text, quotes) => {
    expect(guardSignatureOf(text).quotes).toEqual(quotes);
  });
});

describe('guardDifference: "0.98 cosine similarity can reverse meaning"', () => {
  it.each([
    // negation
    ['Is it safe to take aspirin with ibuprofen?', 'Is it not safe to take aspirin with ibuprofen?', 'negation'],
    ['Should I restart the server after the update?', "Shouldn't I restart the server after the update?", 'negation'],
    ['List foods with gluten', 'List foods without gluten', 'negation'],
    ['Always back up the database', 'Never back up the database', 'negation'],
    // numbers
    ['Convert 5 miles to kilometres', 'Convert 50 miles to kilometres', 'number'],
    ['What is 12 times 13?', 'What is 13 times 12?', 'number'],
    ['Give me three reasons to learn Go', 'Give me four reasons to learn Go', 'number'],
    ['Summarise the first chapter', 'Summarise the second chapter', 'number'],
    // named entities
    ['What is the capital of France?', 'What is the capital of Spain?', 'entity'],
    ['Paris is a big city, right?', 'London is a big city, right?', 'entity'],
    ['Write a poem about Alice and the sea', 'Write a poem about Bob and the sea', 'entity'],
    // quoted strings
    ['Translate "I love you" to Italian', 'Translate "I hate you" to Italian', 'quote'],
    ["Rename the column 'user_id' to id", "Rename the column 'account_id' to id", 'quote'],
  ])('%j vs %j differ in %s', (a, b, reason) => {
    expect(differ(a, b)).toBe(reason);
    expect(differ(b, a)).toBe(reason);
  });

  it.each([
    ['What is the capital of France?', 'what is the capital of France'],
    ['Tell me a joke about cats.', 'Tell me a joke about cats!'],
    ['Convert 1,000 miles to km', 'convert 1000 miles to km'],
    ['Give me two reasons', 'Give me 2 reasons'],
    ['How do I   reverse a list in Python?', 'How do I reverse a list in Python'],
    ["I don't like rain", "I don’t like rain"],
  ])('%j and %j agree', (a, b) => {
    expect(differ(a, b)).toBeUndefined();
  });

  it('compares negations as a multiset (a double negation is not a single one)', () => {
    expect(differ('It is not true that it is not raining', 'It is not true that it is raining')).toBe('negation');
  });
});
